// An OpenAI Agents SDK (`@openai/agents`) agent made durable by jetrun, run
// by the exec agent type: a triage agent that hands research to a
// researcher agent (task_researcher: a nested jetrun run) and sends an
// email only once a person approved it (a jetrun signal wait).
//
//   JETRUN_EXEC_AGENTS="triage=node examples/js/openai-agents/agent.mjs --api http://127.0.0.1:8080,researcher=node examples/js/openai-agents/agent.mjs" make run
//   jetrun dispatch triage '{"prompt":"Tell the team what drives the tides"}'
//   jetrun signal <run id> approve-<call id> '{"approved":true}'
//
// The run's agent type picks the agent. --api is the HTTP API that nested
// runs are dispatched through. With --mock every model is the SDK's own
// ScriptedModel playing a script (mock.mjs, no network); without it, OpenAI's
// (OPENAI_API_KEY; OPENAI_MODEL, default gpt-5-mini).

import { parseArgs } from 'node:util';
import { Agent, OpenAIProvider, setTracingDisabled } from '@openai/agents';
import { child, Client } from 'jetrun';
import { DurableModel, durableTool, runApproved, taskTool } from './durable.mjs';

const { values: opt } = parseArgs({ options: { api: { type: 'string' }, mock: { type: 'boolean' } } });
const mock = opt.mock ? await import('./mock.mjs') : null;
setTracingDisabled(true);

function modelFor(run, name) {
  const inner = mock ? mock.fakeModel(run, name) : new OpenAIProvider().getModel(process.env.OPENAI_MODEL ?? 'gpt-5-mini');
  return new DurableModel(run, inner, { name: mock ? 'fake' : process.env.OPENAI_MODEL ?? 'gpt-5-mini' });
}

const agents = {
  triage: (run, client) => new Agent({
    name: 'triage',
    instructions: 'Find out what was asked with task_researcher, then email the team the answer.',
    model: modelFor(run, 'triage'),
    tools: [
      taskTool(run, 'researcher', { client }),
      durableTool(run, {
        name: 'send_email',
        description: 'Send an email.',
        parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } }, required: ['to', 'body'], additionalProperties: false },
        needsApproval: true,
        execute: async ({ to, body }) => (mock ? mock.sendEmail(run, to, body) : `sent to ${to}`),
      }),
    ],
  }),
  researcher: (run) => new Agent({
    name: 'researcher',
    instructions: 'Answer the objective in one sentence; use lookup.',
    model: modelFor(run, 'researcher'),
    tools: [durableTool(run, {
      name: 'lookup',
      description: 'Look a topic up.',
      parameters: { type: 'object', properties: { topic: { type: 'string' } }, required: ['topic'], additionalProperties: false },
      execute: async ({ topic }) => (mock ? mock.lookup(run, topic) : `nothing known about ${topic}`),
    })],
  }),
};

await child(async (run) => {
  const make = agents[run.agentType];
  if (!make) throw new Error(`no agent for agent type ${run.agentType}; this file serves ${Object.keys(agents).join(', ')}`);
  const client = opt.api ? new Client({ url: opt.api }) : undefined;
  const input = run.input.objective
    ? `${run.input.objective}${run.input.context ? `\n\nContext: ${run.input.context}` : ''}`
    : run.input.prompt;
  const result = await runApproved(run, make(run, client), input, { stream: Boolean(run.input.stream) });
  return { summary: String(result.finalOutput ?? ''), output: { text: result.finalOutput ?? null } };
});
