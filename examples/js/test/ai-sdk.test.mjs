// The Vercel AI SDK agent (ai-sdk/agent.mjs) with the SDK's own mock model,
// run by a real worker: model and tool calls are steps, tokens are chunks,
// the SDK's usage is the run's, and a worker killed with -9 mid-loop never
// makes a stored model or tool call again.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { writeFileSync, rmSync } from 'node:fs';
import { Jetrun, counter, eventually, node } from '../../../sdk/js/test/harness.mjs';
import { Client } from 'jetrun';
import { examples } from './paths.mjs';

const AGENT = `${node} ${examples('ai-sdk', 'agent.mjs')} --mock`;
const PROMPT = 'Compare the weather in Paris and Oslo';
let j;
let client;

before(async () => {
  j = await Jetrun.start();
  client = new Client({ url: j.url });
});
after(async () => { await j?.close(); });

async function history(runId) {
  const evs = [];
  for await (const ev of client.stream(runId, { follow: false })) evs.push(ev);
  return evs;
}

const stepNames = (evs) => evs.filter((e) => e.event === 'step').map((e) => `${e.data.data.name}@${e.data.data.attempt}`);

test('streamText with tools: each model and tool call a step, tokens as chunks, usage from the SDK', async () => {
  await j.worker({ weather: AGENT });
  const ledger = join(j.scratch(), 'ledger');
  const outcome = await client.run('weather', { prompt: PROMPT, ledger }, { runId: 'ai-1' });
  const text = 'Paris has sunny, 21°C. Oslo has snow, -3°C.';
  assert.deepEqual(outcome.output, { text, calls: 3, inputTokens: 360, outputTokens: 48 });
  const evs = await history('ai-1');
  assert.deepEqual(stepNames(evs), ['model-1@1', 'tool-call-paris@1', 'model-2@1', 'tool-call-oslo@1', 'model-3@1']);
  const chunks = evs.filter((e) => e.event === 'chunk').map((e) => e.data.data.data);
  assert.equal(chunks.length, 8, 'one chunk per streamed token');
  assert.equal(chunks.join(''), text);
  const row = await client.get('ai-1');
  assert.deepEqual({ in: row.usage.inputTokens, out: row.usage.outputTokens, model: Object.keys(row.usage.models) },
    { in: 360, out: 48, model: ['mock-weather'] });
  assert.deepEqual(counter(ledger), ['model turn-1 attempt-1', 'tool Paris attempt-1', 'model turn-2 attempt-1',
    'tool Oslo attempt-1', 'model turn-3 attempt-1']);
});

test('kill -9 mid-loop: no model or tool call whose step was stored runs again', async () => {
  const w = await j.worker({ 'weather-k': AGENT });
  const dir = j.scratch();
  const ledger = join(dir, 'ledger');
  const hold = join(dir, 'hold');
  writeFileSync(`${hold}.Oslo`, '');
  await client.dispatch('weather-k', { prompt: PROMPT, ledger, hold }, { runId: 'ai-kill' });
  await eventually(() => counter(ledger).includes('tool Oslo attempt-1'), 'attempt 1 inside the Oslo tool call');
  // The child writes a step line and goes on; the worker stores it just
  // after: kill once the three calls before the Oslo lookup are stored.
  await eventually(async () => stepNames(await history('ai-kill')).length === 3, 'the three calls before it stored');
  assert.deepEqual(stepNames(await history('ai-kill')), ['model-1@1', 'tool-call-paris@1', 'model-2@1']);
  await w.kill();
  rmSync(`${hold}.Oslo`);
  await j.worker({ 'weather-k': AGENT });
  const outcome = await client.await('ai-kill');
  assert.equal(outcome.output.text, 'Paris has sunny, 21°C. Oslo has snow, -3°C.');
  // The model's first two calls and the Paris lookup were stored: attempt 2
  // made none of them again. The Oslo lookup, cut by the kill, ran twice.
  assert.deepEqual(counter(ledger), ['model turn-1 attempt-1', 'tool Paris attempt-1', 'model turn-2 attempt-1',
    'tool Oslo attempt-1', 'tool Oslo attempt-2', 'model turn-3 attempt-2']);
  assert.deepEqual(stepNames(await history('ai-kill')), ['model-1@1', 'tool-call-paris@1', 'model-2@1', 'tool-call-oslo@2', 'model-3@2']);
  const row = await client.get('ai-kill');
  assert.equal(row.attempt, 2);
  assert.equal(row.usage.inputTokens, 360, 'each model call counted once');
});

test('generateText: the same loop, each model call a step answered whole, no chunks', async () => {
  const ledger = join(j.scratch(), 'ledger');
  const outcome = await client.run('weather', { prompt: PROMPT, ledger, generate: true }, { runId: 'ai-gen' });
  assert.deepEqual(outcome.output, { text: 'Paris has sunny, 21°C. Oslo has snow, -3°C.', calls: 3, inputTokens: 360, outputTokens: 48 });
  const evs = await history('ai-gen');
  assert.deepEqual(stepNames(evs), ['model-1@1', 'tool-call-paris@1', 'model-2@1', 'tool-call-oslo@1', 'model-3@1']);
  assert.equal(evs.filter((e) => e.event === 'chunk').length, 0);
  assert.equal((await client.get('ai-gen')).usage.inputTokens, 360);
  assert.equal(counter(ledger).length, 5);
});
