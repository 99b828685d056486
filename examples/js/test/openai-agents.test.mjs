// The OpenAI Agents SDK agent (openai-agents/agent.mjs) with the SDK's own
// ScriptedModel (@openai/agents/testing), run by a real worker: model and
// tool calls are steps, task_researcher is a nested jetrun run, the
// send_email approval is asked through jetrun, and a worker killed with -9
// while the run waits for it makes no stored model call, tool call or
// nested run again.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { writeFileSync, rmSync } from 'node:fs';
import { Jetrun, counter, eventually, node } from '../../../sdk/js/test/harness.mjs';
import { APIError, Client, childRunId } from 'jetrun';
import { examples } from './paths.mjs';

const SCRIPT = examples('openai-agents', 'agent.mjs');
let j;
let client;
let agents;

before(async () => {
  j = await Jetrun.start();
  client = new Client({ url: j.url });
  agents = { triage: `${node} ${SCRIPT} --mock --api ${j.url}`, researcher: `${node} ${SCRIPT} --mock` };
});
after(async () => { await j?.close(); });

async function history(runId) {
  const evs = [];
  for await (const ev of client.stream(runId, { follow: false })) evs.push(ev);
  return evs;
}

const stepNames = async (runId) => (await history(runId)).filter((e) => e.event === 'step').map((e) => `${e.data.data.name}@${e.data.data.attempt}`);

/** The runs nested under runId. */
async function nested(runId) {
  return (await client.request('GET', `/v1/runs?parent=${runId}`)).runs;
}

/** A worker serving both agents, writing to a ledger of its own; killed at the test's end. */
async function serve(t, ledger, hold = '') {
  const w = await j.worker(agents, { AGENT_LEDGER: ledger, AGENT_HOLD: hold });
  t.after(() => w.kill());
  return w;
}

const ALL_ONCE = ['model turn-1 triage attempt-1', 'model turn-1 researcher attempt-1', 'tool lookup(tides) researcher attempt-1',
  'model turn-2 researcher attempt-1', 'model turn-2 triage attempt-1'];

test('task_researcher runs the researcher as a nested run; send_email waits for its approval', async (t) => {
  const ledger = join(j.scratch(), 'ledger');
  await serve(t, ledger);
  await client.dispatch('triage', { prompt: 'Tell the team what drives the tides' }, { runId: 'oa-1' });
  for await (const ev of client.stream('oa-1')) {
    if (ev.event === 'signal' && ev.data.data.state === 'waiting') {
      assert.equal(ev.data.data.name, 'approve-call-email');
      await client.signal('oa-1', 'approve-call-email', { approved: true });
    }
  }
  const outcome = await client.await('oa-1');
  assert.equal(outcome.output.text, 'Emailed the team: The tides: the pull of the moon (sent to team@example.com)');
  const kids = await nested('oa-1');
  assert.equal(kids.length, 1);
  assert.deepEqual({ id: kids[0].id, agentType: kids[0].agentType, call: kids[0].parentToolCallId, status: kids[0].status },
    { id: childRunId('oa-1', 'call-research'), agentType: 'researcher', call: 'call-research', status: 'completed' });
  const kid = await client.get(kids[0].id);
  assert.deepEqual(kid.input, { objective: 'Find what drives the tides', context: 'for the team newsletter' });
  assert.deepEqual(await stepNames('oa-1'), ['model-1@1', 'tool-call-research@1', 'model-2@1', 'approval-call-email@1', 'tool-call-email@1', 'model-3@1']);
  assert.deepEqual(counter(ledger), [...ALL_ONCE, 'tool send_email(team@example.com) triage attempt-1', 'model turn-3 triage attempt-1']);
  const row = await client.get('oa-1');
  assert.deepEqual([row.usage.inputTokens, row.usage.outputTokens], [50 + 60 + 70, 21], 'the triage model\'s three calls');
});

test('a rejected approval: send_email never runs', async (t) => {
  const ledger = join(j.scratch(), 'ledger');
  await serve(t, ledger);
  await client.dispatch('triage', { prompt: 'Tell the team what drives the tides' }, { runId: 'oa-no' });
  await eventually(async () => (await client.get('oa-no')).waitingFor === 'approve-call-email', 'the approval wait');
  await client.signal('oa-no', 'approve-call-email', { approved: false });
  const outcome = await client.await('oa-no');
  assert.match(outcome.output.text, /^Emailed the team: The tides: the pull of the moon \(.*not approved.*\)$/);
  assert.ok(!counter(ledger).some((l) => l.startsWith('tool send_email')), counter(ledger).join('\n'));
});

test('kill -9 while the run waits for an approval: no stored model call, tool call or nested run again', async (t) => {
  const ledger = join(j.scratch(), 'ledger');
  const w = await serve(t, ledger);
  await client.dispatch('triage', { prompt: 'Tell the team what drives the tides' }, { runId: 'oa-kill' });
  await eventually(async () => (await client.get('oa-kill')).waitingFor === 'approve-call-email', 'the approval wait');
  assert.deepEqual(await stepNames('oa-kill'), ['model-1@1', 'tool-call-research@1', 'model-2@1']);
  await w.kill();
  await serve(t, ledger);
  await client.signal('oa-kill', 'approve-call-email', { approved: true });
  const outcome = await client.await('oa-kill');
  assert.equal(outcome.output.text, 'Emailed the team: The tides: the pull of the moon (sent to team@example.com)');
  // Attempt 2 got the two model calls and the researcher's answer stored,
  // and asked the approval once more (attempt 1 never got it).
  assert.deepEqual(counter(ledger), [...ALL_ONCE, 'tool send_email(team@example.com) triage attempt-2', 'model turn-3 triage attempt-2']);
  assert.deepEqual(await stepNames('oa-kill'), ['model-1@1', 'tool-call-research@1', 'model-2@1', 'approval-call-email@2', 'tool-call-email@2', 'model-3@2']);
  assert.equal((await nested('oa-kill')).length, 1, 'one researcher run');
  assert.equal((await client.get('oa-kill')).attempt, 2);
});

test('a streamed run (stream: true), kill -9 at the approval: stored calls played back, not made again; text as chunks', async (t) => {
  const ledger = join(j.scratch(), 'ledger');
  const w = await serve(t, ledger);
  await client.dispatch('triage', { prompt: 'Tell the team what drives the tides', stream: true }, { runId: 'oa-stream' });
  await eventually(async () => (await client.get('oa-stream')).waitingFor === 'approve-call-email', 'the approval wait');
  assert.deepEqual(await stepNames('oa-stream'), ['model-1@1', 'tool-call-research@1', 'model-2@1']);
  await w.kill();
  await serve(t, ledger);
  await client.signal('oa-stream', 'approve-call-email', { approved: true });
  const outcome = await client.await('oa-stream');
  const text = 'Emailed the team: The tides: the pull of the moon (sent to team@example.com)';
  assert.equal(outcome.output.text, text);
  assert.deepEqual(counter(ledger), [...ALL_ONCE, 'tool send_email(team@example.com) triage attempt-2', 'model turn-3 triage attempt-2']);
  assert.deepEqual(await stepNames('oa-stream'), ['model-1@1', 'tool-call-research@1', 'model-2@1', 'approval-call-email@2', 'tool-call-email@2', 'model-3@2']);
  const chunks = (await history('oa-stream')).filter((e) => e.event === 'chunk').map((e) => e.data.data.data);
  assert.deepEqual(chunks, [text], 'the streamed answer, once');
  const row = await client.get('oa-stream');
  assert.deepEqual([row.attempt, row.usage.inputTokens, row.usage.outputTokens], [2, 50 + 60 + 70, 21], 'each model call\'s usage once');
});

test('kill -9 inside the nested run: the parent re-attaches to it, stored calls are not made again', async (t) => {
  const dir = j.scratch();
  const ledger = join(dir, 'ledger');
  const hold = join(dir, 'hold');
  writeFileSync(hold, '');
  const w = await serve(t, ledger, hold);
  await client.dispatch('triage', { prompt: 'Tell the team what drives the tides' }, { runId: 'oa-nest' });
  await eventually(() => counter(ledger).includes('tool lookup(tides) researcher attempt-1'), 'the researcher inside lookup');
  // A child writes a step line and goes on; the worker stores it just
  // after: kill once both runs' first model calls are stored.
  const researcher = childRunId('oa-nest', 'call-research');
  await eventually(async () => (await stepNames('oa-nest')).includes('model-1@1') && (await stepNames(researcher)).includes('model-1@1'),
    'both first model calls stored');
  await w.kill(); // the triage run and its researcher run were both on it
  rmSync(hold);
  await serve(t, ledger);
  await eventually(async () => (await client.get('oa-nest')).waitingFor === 'approve-call-email', 'the approval wait');
  await client.signal('oa-nest', 'approve-call-email', { approved: true });
  const outcome = await client.await('oa-nest');
  assert.equal(outcome.output.text, 'Emailed the team: The tides: the pull of the moon (sent to team@example.com)');
  assert.deepEqual(counter(ledger), ['model turn-1 triage attempt-1', 'model turn-1 researcher attempt-1', 'tool lookup(tides) researcher attempt-1',
    'tool lookup(tides) researcher attempt-2', 'model turn-2 researcher attempt-2', 'model turn-2 triage attempt-2',
    'tool send_email(team@example.com) triage attempt-2', 'model turn-3 triage attempt-2']);
  const kids = await nested('oa-nest');
  assert.equal(kids.length, 1, 'one researcher run, re-attached');
  assert.equal((await client.get(kids[0].id)).attempt, 2);
});

test('the approval is an ask in the inbox, answered once with answer()', async (t) => {
  const ledger = join(j.scratch(), 'ledger');
  await serve(t, ledger);
  await client.dispatch('triage', { prompt: 'Tell the team what drives the tides' }, { runId: 'oa-ask' });
  const ask = await eventually(async () => (await client.asks({ status: 'open', runId: 'oa-ask' })).asks[0], 'the ask');
  assert.deepEqual({ kind: ask.kind, name: ask.name, title: ask.title, payload: ask.payload }, {
    kind: 'approve', name: 'approve-call-email', title: 'triage wants to call send_email',
    payload: { tool: 'send_email', arguments: { to: 'team@example.com', body: 'The tides: the pull of the moon' } },
  });
  await assert.rejects(client.answer(ask.id, { digest: 'sha256:00', value: { approved: true } }),
    (err) => err instanceof APIError && err.status === 409 && err.code === 'stale_digest');
  const answered = await client.answer(ask.id, { digest: ask.digest, value: { approved: true }, by: 'alice' });
  assert.equal(answered.answer.by, 'alice');
  await assert.rejects(client.answer(ask.id, { digest: ask.digest, value: { approved: false } }),
    (err) => err instanceof APIError && err.status === 409 && err.code === 'already_answered');
  const outcome = await client.await('oa-ask');
  assert.equal(outcome.output.text, 'Emailed the team: The tides: the pull of the moon (sent to team@example.com)');
  assert.deepEqual(counter(ledger).filter((l) => l.startsWith('tool send_email')), ['tool send_email(team@example.com) triage attempt-1']);
});
