// MCP tasks with the official TypeScript SDK (@modelcontextprotocol/sdk), in
// the 2025-11-25 experimental form it speaks: a tool called as a task
// (client.experimental.tasks.callToolStream), the status notifications
// (notifications/tasks/status), the run's question answered through an
// elicitation (the demo's approval signal), the result; then tasks/list, a
// task cancelled (tasks/cancel), and tasks/get of an unknown task.
//
//   npm ci
//   node mcp-tasks.mjs --url http://127.0.0.1:8080/mcp --token "$TOKEN" \
//     --tool demo --args '{"steps":3,"stepMs":100,"approveAt":2}' --answer '{"approved":true}'
//
// Each line of output is one thing that happened, as JSON.

import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, TaskStatusNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const { values: opt } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080/mcp" },
    token: { type: "string", default: process.env.JETRUN_TOKEN ?? "" },
    tool: { type: "string", default: "demo" },
    args: { type: "string", default: '{"steps":3,"stepMs":100,"approveAt":2}' },
    answer: { type: "string", default: '{"approved":true}' },
    "cancel-args": { type: "string", default: '{"steps":2,"stepMs":100,"approveAt":1}' },
    timeout: { type: "string", default: "60000" },
  },
});

const say = (what, fields) => console.log(JSON.stringify({ what, ...fields }));
const headers = opt.token ? { Authorization: `Bearer ${opt.token}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(opt.url), { requestInit: { headers } });
const client = new Client({ name: "jetrun-js-mcp-tasks", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } } });
const timeout = Number(opt.timeout);

// What the run waits on comes as an elicitation: accept it with --answer.
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  say("elicitation", { message: req.params.message, _meta: req.params._meta });
  return { action: "accept", content: JSON.parse(opt.answer) };
});
client.setNotificationHandler(TaskStatusNotificationSchema, (n) => say("task-status", n.params));

try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  say("tools", { tools: tools.map((t) => ({ name: t.name, execution: t.execution })) });

  const tasks = client.experimental.tasks;
  for await (const msg of tasks.callToolStream({ name: opt.tool, arguments: JSON.parse(opt.args) }, undefined, { timeout })) {
    if (msg.type === "taskCreated" || msg.type === "taskStatus") say(msg.type, msg.task);
    else if (msg.type === "result") say("result", msg.result);
    else if (msg.type === "error") say("error", { code: msg.error.code, message: msg.error.message });
  }
  say("tasks", await tasks.listTasks());

  // A task cancelled as soon as it exists.
  for await (const msg of tasks.callToolStream({ name: opt.tool, arguments: JSON.parse(opt["cancel-args"]) }, undefined, { timeout })) {
    if (msg.type === "taskCreated") {
      say("cancel", await tasks.cancelTask(msg.task.taskId));
      break;
    }
  }

  try {
    await tasks.getTask("no-such-task");
    say("unknown-task-found", {});
  } catch (err) {
    say("unknown-task", { code: err.code, message: err.message });
  }
} finally {
  await client.close();
}
