// Sub-agents (docs/protocol.md, "Sub-agents"), the way AG2 names them:
// task_<agent> delegate tools with an objective and an optional context,
// and create_and_run_agent, which runs an agent made from a spec as a
// child of a generic agent type. The tools' shapes and the answers a model
// reads are those of the Go worker's Run.SubAgentTools and Run.RunSubAgent.

import { RunFailure } from './client.js';
import { Run, variableChanges } from './child.js';
import { childRunId } from './runid.js';

export const DYNAMIC_TOOL = 'create_and_run_agent';

const taskParameters = () => ({
  type: 'object',
  properties: {
    objective: { type: 'string', description: 'What the sub-agent must achieve.' },
    context: { type: 'string', description: 'What the sub-agent needs to know that the objective does not say.' },
  },
  required: ['objective'],
  additionalProperties: false,
});

const toolName = (d) => d.name ?? `task_${d.agentType}`;

/** Whether a run's input is a dynamic agent's (it carries a spec). */
const isDynamic = (input) => input !== null && typeof input === 'object' && input.spec != null;

/**
 * The OpenAI-format tool definitions of subs: a task_<agent> tool per
 * delegate ({agentType, name?, description?, session?}), and
 * create_and_run_agent when subs.dynamicType is set and run is not itself a
 * dynamic agent.
 * @param {import('./child.js').Run} run
 * @param {{delegates?: {agentType: string, name?: string, description?: string, session?: string}[], dynamicType?: string, pool?: string[]}} subs
 */
export function subAgentTools(run, subs) {
  const tools = (subs.delegates ?? []).map((d) => ({
    type: 'function',
    function: {
      name: toolName(d),
      description: d.description ?? `Delegate a task to the ${d.agentType} agent: give it an objective and, optionally, context.`,
      parameters: taskParameters(),
    },
  }));
  if (subs.dynamicType && !isDynamic(run.input)) {
    tools.push({
      type: 'function',
      function: {
        name: DYNAMIC_TOOL,
        description: 'Create an agent from a spec (a name, a prompt, tools from the pool, an optional response schema) and run it on an objective; returns its answer.',
        parameters: {
          type: 'object',
          properties: {
            spec: {
              type: 'object',
              properties: {
                name: { type: 'string' }, prompt: { type: 'string', description: "The agent's system prompt." },
                tools: { type: 'array', items: { type: 'string', enum: [...(subs.pool ?? [])] }, description: 'Tools the agent may use, from the pool.' },
                responseSchema: { type: 'object', description: "Optional JSON Schema of the agent's answer." },
              },
              required: ['name', 'prompt'],
            },
            objective: { type: 'string' }, context: { type: 'string' },
          },
          required: ['spec', 'objective'],
          additionalProperties: false,
        },
      },
    });
  }
  return tools;
}

/**
 * Runs the model's tool call (callId, name, args) of subs as a nested run of
 * run and returns the text the model reads: the child's output (a string as
 * is, else its JSON), or its summary. What the model can fix (an unknown
 * tool, no objective, a spec tool outside subs.pool, a failed child) is
 * answered as a text starting "error:"; other errors are thrown. The
 * child's input carries run's variables; those a completed child changed
 * become run's (run.variables()).
 * @param {import('./child.js').Run} run
 * @param {{delegates?: object[], dynamicType?: string, pool?: string[], client?: import('./client.js').Client}} subs
 * @param {string} callId @param {string} name @param {any} args
 * @returns {Promise<string>}
 */
export async function runSubAgent(run, subs, callId, name, args) {
  const a = typeof args === 'string' ? JSON.parse(args) : (args ?? {});
  let agentType;
  let session;
  const input = { objective: a.objective, ...(a.context ? { context: a.context } : {}) };
  if (name === DYNAMIC_TOOL && subs.dynamicType) {
    if (isDynamic(run.input)) return 'error: a dynamic agent cannot create dynamic agents';
    const problems = [];
    const pool = subs.pool ?? [];
    if (!a.objective) problems.push('objective is required');
    if (!a.spec) problems.push('spec is required');
    else {
      if (!a.spec.name) problems.push('spec.name is required');
      if (!a.spec.prompt) problems.push('spec.prompt is required');
      for (const t of a.spec.tools ?? []) {
        if (!pool.includes(t)) problems.push(`unknown tool ${JSON.stringify(t)}: choose from the pool [${pool.join(', ')}]`);
      }
    }
    if (problems.length) return `error: ${name}: ${problems.join('\n')}`;
    agentType = subs.dynamicType;
    input.spec = a.spec;
  } else {
    const d = (subs.delegates ?? []).find((x) => toolName(x) === name);
    if (!d) {
      const names = (subs.delegates ?? []).map(toolName);
      if (subs.dynamicType && !isDynamic(run.input)) names.push(DYNAMIC_TOOL);
      return `error: unknown tool ${JSON.stringify(name)}: use one of [${names.join(', ')}]`;
    }
    if (!a.objective || typeof a.objective !== 'string') return `error: ${name}: objective is required`;
    agentType = d.agentType;
    session = d.session;
  }
  const vars = run.variables();
  if (Object.keys(vars).length > 0) input.variables = vars;
  let out;
  try {
    out = await run.runChild(agentType, input, { callId, client: subs.client, session });
  } catch (err) {
    if (err instanceof RunFailure) return `error: sub-agent ${agentType} ended ${err.status}: ${err.error}`;
    throw err;
  }
  await takeVariables(run, Run.clientOf(run, subs.client), childRunId(run.id, callId));
  if (out.output !== undefined && out.output !== null) return typeof out.output === 'string' ? out.output : JSON.stringify(out.output);
  return out.summary ?? '';
}

/**
 * Makes the variables the completed child changed (its variable steps, in
 * the order stored) run's, those that differ from its own.
 * @param {import('./child.js').Run} run @param {import('./client.js').Client} client @param {string} child
 */
async function takeVariables(run, client, child) {
  const steps = [];
  for await (const ev of client.stream(child, { follow: false })) {
    const st = ev.event === 'step' ? ev.data?.data : undefined; // data: {seq, kind, data: <the step>, …}
    if (st && typeof st === 'object' && !st.error) steps.push([String(st.name ?? ''), st.output]);
  }
  const { vars, keys } = variableChanges(steps);
  const mine = run.variables();
  for (const k of keys) {
    if (Object.hasOwn(mine, k) && JSON.stringify(mine[k]) === JSON.stringify(vars[k])) continue;
    await run.setVariable(k, vars[k]);
  }
}
