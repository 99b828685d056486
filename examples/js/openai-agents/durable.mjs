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
      return this.#store(res.output, res.responseId, res.usage);
    });
    return { output: stored.output, responseId: stored.responseId, usage: new Usage(stored.usage) };
  }

  /**
   * A streamed call (run(agent, input, {stream: true})), the same step: the
   * model's text deltas go to the SDK as they come and to the run as
   * chunks, and its response_done is stored. A call stored already is
   * played back from the step: its text as one delta, then response_done.
   */
  async *getStreamedResponse(request) {
    const live = []; // the inner model's events, while the step runs it
    let wake = () => {};
    let done = false;
    let failed;
    let stored;
    this.run.step(`${this.prefix}-${++this.n}`, async () => {
      let response;
      for await (const ev of this.inner.getStreamedResponse(request)) {
        if (ev.type === 'output_text_delta' && ev.delta) this.run.chunk(ev.delta);
        if (ev.type === 'response_done') response = ev.response;
        live.push(ev);
        wake();
      }
      if (!response) throw new Error('DurableModel: the model\'s stream ended without response_done');
      return this.#store(response.output, response.id, new Usage(response.usage));
    }).then((v) => { stored = v; }, (err) => { failed = err; }).finally(() => { done = true; wake(); });
    let played = false;
    for (;;) {
      while (live.length) { played = true; yield live.shift(); }
      if (done) break;
      await new Promise((r) => { wake = r; });
    }
    if (failed) throw failed;
    if (played) return;
    yield { type: 'response_started' };
    const text = stored.output.filter((i) => i.type === 'message').flatMap((i) => i.content ?? [])
      .filter((c) => c.type === 'output_text').map((c) => c.text).join('');
    if (text) yield { type: 'output_text_delta', delta: text };
    yield { type: 'response_done', response: { id: stored.responseId, usage: stored.usage, output: stored.output } };
  }

  /** What a step stores of a model call; reports its usage. */
  #store(output, responseId, usage) {
    const u = usage ?? new Usage();
    this.run.usage({ inputTokens: u.inputTokens, outputTokens: u.outputTokens, model: this.name });
    return { output, responseId,
      usage: { requests: u.requests, inputTokens: u.inputTokens, outputTokens: u.outputTokens, totalTokens: u.totalTokens } };
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
 * With opts.stream the agent runs streamed (each model call streamed, see
 * DurableModel.getStreamedResponse), opts.onEvent seeing its events.
 * @param {import('@openai/agents').Agent} agent
 * @param {string} input
 * @param {{stream?: boolean, onEvent?: (ev: any) => void}} [opts]
 */
export async function runApproved(run, agent, input, opts = {}) {
  const go = async (what) => {
    if (!opts.stream) return runAgent(agent, what);
    const streamed = await runAgent(agent, what, { stream: true });
    for await (const ev of streamed) opts.onEvent?.(ev);
    await streamed.completed;
    return streamed;
  };
  let result = await go(input);
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
    result = await go(result.state);
  }
  return result;
}
