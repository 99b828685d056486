// An MCP host's view of jetrun, with the official TypeScript SDK
// (@modelcontextprotocol/sdk): it connects to parent-worker's /mcp with a
// bearer token, lists the tools (the live agent types), calls one with a
// progress token and prints the progress and the result, then calls it
// again with arguments that break its schema and prints the error.
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

  if (opt["bad-args"]) {
    try {
      await client.callTool({ name: opt.tool, arguments: JSON.parse(opt["bad-args"]) }, undefined, { timeout });
      say("bad-args-accepted", {});
    } catch (err) {
      say("error", { code: err.code, message: err.message });
    }
  }
} finally {
  await client.close();
}
