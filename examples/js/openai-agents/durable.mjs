// Durability for an OpenAI Agents SDK (`@openai/agents`) agent, with the
// agent's code kept: its model wrapped, its tools declared with durableTool
// in place of tool, sub-agents reached through task_<agent> tools that run
// them as nested jetrun runs, and tool approvals asked through jetrun.
//
//   const model = new DurableModel(run, new OpenAIProvider().getModel('gpt-5-mini'));
//   const agent = new Agent({ name: 'triage', model, tools: [taskTool(run, 'researcher'), durableTool(run, {...})] });
//   const result = await runApproved(run, agent, run.input.prompt);

import { run as runAgent, tool, Usage } from '@openai/agents';

/** A token for step and signal names from a call id. */
function token(id) {
  return String(id).replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 56);
}

/**
 * A Model whose every call is a jetrun step "<prefix>-1", "<prefix>-2" …,
 * its usage the SDK's: an attempt that takes the run over gets the stored
 * answers back and does not call the model again.
 */
export class DurableModel {
  /**
   * @param {import('jetrun').Run} run
   * @param {import('@openai/agents').Model} inner
   * @param {{prefix?: string, name?: string}} [opts] name: the model's name in usage reports
   */
  constructor(run, inner, opts = {}) {
    this.run = run;
    this.inner = inner;
    this.prefix = opts.prefix ?? 'model';
    this.name = opts.name ?? inner.name ?? 'model';
    this.n = 0;
  }

  async getResponse(request) {
    const stored = await this.run.step(`${this.prefix}-${++this.n}`, async () => {
      const res = await this.inner.getResponse(request);
      const u = res.usage ?? new Usage();
      this.run.usage({ inputTokens: u.inputTokens, outputTokens: u.outputTokens, model: this.name });
      return { output: res.output, responseId: res.responseId,
        usage: { requests: u.requests, inputTokens: u.inputTokens, outputTokens: u.outputTokens, totalTokens: u.totalTokens } };
    });
    return { output: stored.output, responseId: stored.responseId, usage: new Usage(stored.usage) };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error('DurableModel: streamed runs are not supported here; run the agent without stream');
  }
}

/**
 * tool(options) whose execute is a jetrun step "tool-<callId>": a call the
 * run made already returns its stored result.
 * @param {import('jetrun').Run} run
 * @param {any} options the options of @openai/agents' tool()
 */
export function durableTool(run, options) {
  let n = 0;
  return tool({
    ...options,
    execute: (input, context, details) => {
      const id = details?.toolCall?.callId ?? `${options.name}-${++n}`;
      return run.step(`tool-${token(id)}`, () => options.execute(input, context, details));
    },
  });
}

/**
 * The delegate tool of a sub-agent, the way AG2 names them: task_<agent>,
 * with objective (required) and context (optional). A call runs agentType
 * as a nested jetrun run of this one (its id derived from the tool call's,
 * so a takeover re-attaches to it) and answers with its final output.
 * @param {import('jetrun').Run} run
 * @param {string} agentType the jetrun agent type that serves the sub-agent
 * @param {{name?: string, description?: string, client?: import('jetrun').Client}} [opts]
 */
export function taskTool(run, agentType, opts = {}) {
  return durableTool(run, {
    name: opts.name ?? `task_${agentType}`,
    description: opts.description ?? `Hand a task to the ${agentType} agent and get its answer.`,
    strict: false,
    parameters: {
      type: 'object',
      properties: {
        objective: { type: 'string', description: 'What the agent is to achieve.' },
        context: { type: 'string', description: 'What it needs to know.' },
      },
      required: ['objective'],
      additionalProperties: false,
    },
    execute: async ({ objective, context }, _ctx, details) => {
      const input = context ? { objective, context } : { objective };
      const out = await run.runChild(agentType, input, { callId: details?.toolCall?.callId ?? `task_${agentType}`, client: opts.client });
      return out.summary;
    },
  });
}

/**
 * Runs agent on input; each tool call that needs approval is asked through
 * jetrun — a wait for the signal approve-<callId>, payload {"approved":
 * bool}, that is an ask of kind approve showing the tool and its arguments
 * (answered in the asks inbox, or by the signal) — and the run goes on with
 * the answer. The answer is stored as the
 * step approval-<callId>, so a takeover does not ask again.
 * @param {import('jetrun').Run} run
 * @param {import('@openai/agents').Agent} agent
 * @param {string} input
 */
export async function runApproved(run, agent, input) {
  let result = await runAgent(agent, input);
  while (result.interruptions?.length) {
    for (const item of result.interruptions) {
      const callId = item.rawItem.callId ?? item.rawItem.id;
      run.progress(0.5, { phase: 'approval', message: `${item.name} needs approval (signal approve-${token(callId)})`, data: { tool: item.name, arguments: item.arguments } });
      let args = item.arguments;
      try { args = JSON.parse(args); } catch { /* keep the text */ }
      const ask = { kind: 'approve', title: `${agent.name} wants to call ${item.name}`, payload: { tool: item.name, arguments: args } };
      const answer = await run.step(`approval-${token(callId)}`, () => run.wait(`approve-${token(callId)}`, { ask }));
      if (answer?.approved) result.state.approve(item);
      else result.state.reject(item);
    }
    result = await runAgent(agent, result.state);
  }
  return result;
}
