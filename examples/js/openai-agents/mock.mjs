// The test double of agent.mjs: the Agents SDK's own ScriptedModel playing
// a script per agent, and fake tools. Each writes a line per call to the
// file $AGENT_LEDGER (every run of the worker, nested ones included), so a
// test counts the calls.

import { appendFileSync, existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Usage } from '@openai/agents';
import { ScriptedModel, modelResponder } from '@openai/agents/testing';

function note(run, line) {
  if (process.env.AGENT_LEDGER) appendFileSync(process.env.AGENT_LEDGER, `${line} ${run.agentType} attempt-${run.attempt}\n`);
}

const call = (callId, name, args) => ({ type: 'function_call', id: `fc-${callId}`, callId, name, arguments: JSON.stringify(args), status: 'completed' });
const say = (text) => ({ type: 'message', id: 'msg-1', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] });

/** The script of each agent: its next output, from the tool results so far. */
const scripts = {
  triage: (results) => [
    () => call('call-research', 'task_researcher', { objective: 'Find what drives the tides', context: 'for the team newsletter' }),
    () => call('call-email', 'send_email', { to: 'team@example.com', body: results[0] }),
    () => say(`Emailed the team: ${results[0]} (${results[1]})`),
  ][results.length](),
  researcher: (results) => [
    () => call('call-lookup', 'lookup', { topic: 'tides' }),
    () => say(`The tides: ${results[0]}`),
  ][results.length](),
};

function textOf(output) {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) return output.map(textOf).join('');
  return output?.text ?? JSON.stringify(output);
}

/**
 * The model of agent name: the Agents SDK's own test double, ScriptedModel
 * (@openai/agents/testing), each call answered by the agent's script from
 * the tool results in the call's request (so a takeover, whose stored calls
 * are not made, goes on where the script is).
 * @param {import('jetrun').Run} run @param {string} name
 */
export function fakeModel(run, name) {
  const respond = (call) => {
    const items = Array.isArray(call.request.input) ? call.request.input : [];
    const results = items.filter((i) => i.type === 'function_call_result').map((i) => textOf(i.output));
    note(run, `model turn-${results.length + 1}`);
    return {
      output: [scripts[name](results)],
      usage: new Usage({ requests: 1, inputTokens: 50 + 10 * results.length, outputTokens: 7, totalTokens: 57 + 10 * results.length }),
      responseId: `resp-${name}-${results.length + 1}`,
    };
  };
  return new ScriptedModel(Array.from({ length: 8 }, () => modelResponder(respond)));
}

/** Looks a topic up; waits while the file $AGENT_HOLD exists. */
export async function lookup(run, topic) {
  note(run, `tool lookup(${topic})`);
  while (process.env.AGENT_HOLD && existsSync(process.env.AGENT_HOLD)) await sleep(20);
  return 'the pull of the moon';
}

export function sendEmail(run, to) {
  note(run, `tool send_email(${to})`);
  return `sent to ${to}`;
}
