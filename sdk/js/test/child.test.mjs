// The child side against a real parent-worker and child-workers: every verb
// of Run reaches the run as docs/protocol.md says, and a kill -9 of the
// worker between steps never runs a stored step again.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { writeFileSync, rmSync } from 'node:fs';
import { Jetrun, counter, eventually, here, node } from './harness.mjs';
import { Client, RunFailure } from '../index.js';

const AGENT = `${node} ${join(here, 'children', 'agent.mjs')}`;
let j;
let client;
let worker;

before(async () => {
  j = await Jetrun.start();
  client = new Client({ url: j.url });
  worker = await j.worker({ 'js-agent': AGENT });
});
after(async () => { await j?.close(); });

function scratch() {
  return j.scratch();
}

/** The run's stored events, to their end. */
async function history(runId) {
  const evs = [];
  for await (const ev of client.stream(runId, { follow: false })) evs.push(ev);
  return evs;
}

test('a child streams, stores steps with usage, waits for a signal, calls its caller and completes', async () => {
  const ledger = join(scratch(), 'ledger');
  await client.dispatch('js-agent', { ledger, turns: 3, wait: 'approve', call: 'ask-user' }, { runId: 'js-verbs' });
  const seen = [];
  for await (const ev of client.stream('js-verbs')) {
    seen.push(ev);
    if (ev.event === 'signal' && ev.data.data.state === 'waiting') await client.signal('js-verbs', 'approve', { approved: true });
    if (ev.event === 'call') await client.reply('js-verbs', ev.data.data.seq, { output: { answer: 42 } });
  }
  const outcome = await client.await('js-verbs');
  assert.deepEqual(outcome, {
    ok: true, runId: 'js-verbs', status: 'completed', summary: 'w1 w2 w3',
    output: { words: ['w1', 'w2', 'w3'], attempt: 1, payload: { approved: true }, reply: { answer: 42 } },
  });
  const kinds = seen.filter((e) => !['caught-up', 'progress'].includes(e.event)).map((e) => {
    const d = e.data.data ?? {};
    switch (e.event) {
      case 'chunk': return `chunk:${d.data}`;
      case 'step': return `step:${d.name}`;
      case 'signal': return `signal:${d.state}`;
      case 'status': return `status:${d.status}`;
      case 'milestone': return `milestone:${d.name}`;
      default: return e.event;
    }
  });
  assert.deepEqual(kinds, ['status:running', 'step:think-1', 'chunk:w1 ', 'step:think-2', 'chunk:w2 ', 'step:think-3', 'chunk:w3 ',
    'milestone:thought', 'signal:waiting', 'signal:received', 'call', 'reply', 'status:completed', 'end']);
  const steps = seen.filter((e) => e.event === 'step' && e.data.data.name.startsWith('think-'));
  for (const s of steps) assert.deepEqual(s.data.data.usage, { inputTokens: 10, outputTokens: 5, costMicros: 100, models: { 'mock-1': { inputTokens: 10, outputTokens: 5, costMicros: 100 } } });
  assert.ok(seen.some((e) => e.event === 'progress' && e.data.data.phase === 'thinking'));
  const row = await client.get('js-verbs');
  assert.equal(row.usage.inputTokens, 31); // three steps and one report of the run's own
  assert.equal(row.usage.outputTokens, 15);
  assert.equal(row.milestones, 1);
  assert.deepEqual(counter(ledger), ['think-1 1', 'think-2 1', 'think-3 1']);
});

test('a worker killed with -9 inside a step: no step stored before the kill runs again', async () => {
  const dir = scratch();
  const ledger = join(dir, 'ledger');
  const hold = join(dir, 'hold');
  writeFileSync(`${hold}.3`, '');
  const w = await j.worker({ 'js-kill': AGENT });
  await client.dispatch('js-kill', { ledger, turns: 4, hold }, { runId: 'js-kill-1' });
  await eventually(() => counter(ledger).includes('think-3 1'), 'attempt 1 inside step think-3');
  // The child wrote think-2's line before it began think-3; the worker stores it a moment later.
  const storedNames = async () => (await history('js-kill-1')).filter((e) => e.event === 'step').map((e) => e.data.data.name);
  await eventually(async () => (await storedNames()).length >= 2, 'steps think-1 and think-2 stored');
  assert.deepEqual(await storedNames(), ['think-1', 'think-2']);
  await w.kill();
  rmSync(`${hold}.3`);
  await j.worker({ 'js-kill': AGENT });
  const outcome = await client.await('js-kill-1');
  assert.deepEqual(outcome.output.words, ['w1', 'w2', 'w3', 'w4']);
  assert.equal(outcome.output.attempt, 2);
  // Steps 1 and 2 ran once (attempt 1); step 3 was cut by the kill and ran again; step 4 ran once.
  assert.deepEqual(counter(ledger), ['think-1 1', 'think-2 1', 'think-3 1', 'think-3 2', 'think-4 2']);
  const stored = (await history('js-kill-1')).filter((e) => e.event === 'step').map((e) => `${e.data.data.name}@${e.data.data.attempt}`);
  assert.deepEqual(stored, ['think-1@1', 'think-2@1', 'think-3@2', 'think-4@2']);
  const row = await client.get('js-kill-1');
  assert.equal(row.usage.inputTokens, 41, 'each stored step counted once, the cut one never');
});

test('a retryable failure is tried again as a new attempt; a plain one ends the run error', async () => {
  const ok = await client.run('js-agent', { turns: 1, fail: { message: 'rate limited', retryable: true }, failOnAttempt: 1 }, { runId: 'js-retry' });
  assert.equal(ok.output.attempt, 2);
  await assert.rejects(client.run('js-agent', { turns: 1, fail: { message: 'bad input', retryable: false } }, { runId: 'js-fail' }),
    (err) => err instanceof RunFailure && err.status === 'error' && err.error.includes('bad input') && err.retryable === false);
  await assert.rejects(client.run('js-agent', { turns: 1, crash: true }, { runId: 'js-crash' }),
    (err) => err instanceof RunFailure && err.status === 'error' && err.error.includes('plain error'));
  const row = await client.get('js-fail');
  assert.equal(row.attempt, 1);
});

test('cancel stops a running child', async () => {
  const dir = scratch();
  const hold = join(dir, 'hold');
  writeFileSync(`${hold}.1`, '');
  const ledger = join(dir, 'ledger');
  await client.dispatch('js-agent', { ledger, turns: 2, hold }, { runId: 'js-cancel' });
  await eventually(() => counter(ledger).length === 1, 'the child inside its first step');
  const row = await client.cancel('js-cancel', 'changed my mind');
  assert.equal(row.id, 'js-cancel');
  await assert.rejects(client.await('js-cancel'), (err) => err instanceof RunFailure && err.status === 'aborted');
  assert.deepEqual(counter(ledger), ['think-1 1']);
  void worker;
});

test('reserve holds spend against the tree budget; the reservation that does not fit is refused', async () => {
  await j.worker({ 'js-reserve': `${node} ${join(here, 'children', 'reserve.mjs')}` });
  const outcome = await client.run('js-reserve', { each: 40 }, { runId: 'js-res', budget: { tokens: 100 } });
  assert.deepEqual(outcome.output, ['ok', 'ok', 'budget-exceeded']);
  assert.equal((await client.get('js-res')).usage.inputTokens, 80);
});
