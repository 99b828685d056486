// An MCP host's view of jetrun, with the official TypeScript SDK
// (@modelcontextprotocol/sdk): it connects to parent-worker's /mcp with a
// bearer token, lists the tools (the live agent types), calls one with a
// progress token and prints the progress and the result, then calls it
// again with arguments that break its schema and prints the error.
// Optionally: a call that fails (--fail-args), a call it cancels at its
// first progress (--cancel-args, --cancel-key), and the errors of an unknown
// tool and of oversize arguments (--checks).
//
//   npm ci
//   node mcp-client.mjs --url http://127.0.0.1:8080/mcp --token "$TOKEN" \
//     --tool demo --args '{"steps":3,"stepMs":100}' --bad-args '{"steps":"three"}'
//
// Each line of output is one thing that happened, as JSON.

import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { values: opt } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080/mcp" },
    token: { type: "string", default: process.env.JETRUN_TOKEN ?? "" },
    tool: { type: "string", default: "demo" },
    args: { type: "string", default: '{"steps":3,"stepMs":100}' },
    "bad-args": { type: "string", default: "" },
    key: { type: "string", default: "" },
    "fail-args": { type: "string", default: "" },
    "cancel-args": { type: "string", default: "" },
    "cancel-key": { type: "string", default: "" },
    checks: { type: "boolean", default: false },
    timeout: { type: "string", default: "60000" },
  },
});

const say = (what, fields) => console.log(JSON.stringify({ what, ...fields }));
const headers = opt.token ? { Authorization: `Bearer ${opt.token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(opt.url), { requestInit: { headers } });
const client = new Client({ name: "jetrun-js-mcp-client", version: "1.0.0" });
const timeout = Number(opt.timeout);

try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  say("tools", { names: tools.map((t) => t.name), tool: tools.find((t) => t.name === opt.tool) });

  const params = { name: opt.tool, arguments: JSON.parse(opt.args) };
  if (opt.key) params._meta = { "io.jetrun/idempotencyKey": opt.key };
  const result = await client.callTool(params, undefined, {
    timeout,
    onprogress: (p) => say("progress", p),
  });
  say("result", result);

  // A call expected to be refused: prints what, with the error.
  const refused = async (what, params) => {
    try {
      await client.callTool(params, undefined, { timeout });
      say(`${what}-accepted`, {});
    } catch (err) {
      say(what, { code: err.code, message: err.message });
    }
  };
  if (opt["bad-args"]) await refused("error", { name: opt.tool, arguments: JSON.parse(opt["bad-args"]) });
  if (opt.checks) {
    await refused("unknown-tool", { name: "no-such-tool", arguments: {} });
    await refused("oversize", { name: opt.tool, arguments: { pad: "x".repeat(300 * 1024) } });
  }

  if (opt["fail-args"]) {
    // The SDK checks structuredContent against the tool's output schema,
    // isError or not: jetrun's failure value is in _meta.
    say("failed", await client.callTool({ name: opt.tool, arguments: JSON.parse(opt["fail-args"]) }, undefined, { timeout }));
  }

  if (opt["cancel-args"]) {
    // Abort at the first progress: the SDK sends notifications/cancelled.
    const abort = new AbortController();
    const params = { name: opt.tool, arguments: JSON.parse(opt["cancel-args"]) };
    if (opt["cancel-key"]) params._meta = { "io.jetrun/idempotencyKey": opt["cancel-key"] };
    try {
      await client.callTool(params, undefined, { timeout, signal: abort.signal, onprogress: () => abort.abort("enough") });
      say("cancel-answered", {});
    } catch (err) {
      say("cancelled", { message: String(err.message ?? err) });
    }
    if (opt["cancel-key"]) {
      // The SDK sends notifications/cancelled without waiting: calling again
      // with the key re-attaches to the run and answers how it ended.
      say("cancelled-run", await client.callTool(params, undefined, { timeout }));
    }
  }
} finally {
  await client.close();
}
