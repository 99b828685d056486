// The caller side against a real parent-worker: dispatch and await over
// HTTP, the event stream resumed by Last-Event-ID (given, and after a
// dropped connection), and dispatch over NATS.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Jetrun, counter, eventually, here, node } from './harness.mjs';
import { Client, APIError, connectNats } from '../index.js';

const AGENT = `${node} ${join(here, 'children', 'agent.mjs')}`;
let j;
let client;

before(async () => {
  j = await Jetrun.start();
  client = new Client({ url: j.url });
  await j.worker({ 'js-call': AGENT });
});
after(async () => { await j?.close(); });

async function all(iter) {
  const out = [];
  for await (const ev of iter) out.push(ev);
  return out;
}

test('dispatch answers the row; the same id re-attaches; await answers the outcome', async () => {
  const row = await client.dispatch('js-call', { turns: 2 }, { runId: 'c-1' });
  assert.equal(row.id, 'c-1');
  assert.equal(row.agentType, 'js-call');
  const again = await client.dispatch('js-call', { turns: 9 }, { runId: 'c-1' });
  assert.deepEqual(again.input, { turns: 2 }, 'the existing run, not a new one');
  const outcome = await client.await('c-1');
  assert.equal(outcome.summary, 'w1 w2');
  assert.deepEqual((await client.await('c-1')).output, outcome.output, 'awaiting an ended run answers its outcome');
});

test('bad input is a clear error', async () => {
  await assert.rejects(client.get('no-such-run'), (err) => err instanceof APIError && err.status === 404);
  await assert.rejects(client.dispatch('nobody-serves-this', {}), (err) => err instanceof APIError && err.status >= 400 && /unknown agent type/.test(err.message));
  await assert.rejects(client.dispatch('js-call', {}, { runId: 'bad.id' }), TypeError);
});

test('stream resumes after a given Last-Event-ID without a gap or a repeat', async () => {
  await client.run('js-call', { turns: 5 }, { runId: 'c-stream' });
  const full = (await all(client.stream('c-stream'))).filter((e) => e.id !== undefined);
  assert.ok(full.length >= 8, `only ${full.length} events`);
  const cut = 3;
  const rest = (await all(client.stream('c-stream', { after: full[cut - 1].id }))).filter((e) => e.id !== undefined);
  assert.deepEqual(rest.map((e) => e.id), full.slice(cut).map((e) => e.id));
});

test('stream reconnects with Last-Event-ID when the connection drops', async () => {
  await client.run('js-call', { turns: 6 }, { runId: 'c-drop' });
  const want = (await all(client.stream('c-drop'))).filter((e) => e.id !== undefined).map((e) => e.id);
  // A fetch whose first event stream breaks after four events.
  const asked = [];
  let broken = false;
  const dropping = async (url, init) => {
    const res = await fetch(url, init);
    asked.push(init?.headers?.['Last-Event-ID'] ?? null);
    if (broken || !String(url).includes('/events')) return res;
    broken = true;
    const reader = res.body.getReader();
    let events = 0;
    let carry = '';
    const body = new ReadableStream({
      async pull(ctl) {
        const { value, done } = await reader.read();
        if (done) return ctl.close();
        const blocks = (carry + new TextDecoder().decode(value)).split('\n\n');
        carry = blocks[blocks.length - 1];
        let keep = '';
        for (let i = 0; i < blocks.length - 1; i++) {
          if (events === 4) {
            ctl.enqueue(new TextEncoder().encode(keep));
            await reader.cancel();
            return ctl.error(new Error('connection reset'));
          }
          keep += `${blocks[i]}\n\n`;
          if (blocks[i].includes('\nid: ') || blocks[i].startsWith('id: ')) events++;
        }
        ctl.enqueue(new TextEncoder().encode(keep));
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  const c = new Client({ url: j.url, fetch: dropping, reconnectDelayMs: 10 });
  const got = (await all(c.stream('c-drop'))).filter((e) => e.id !== undefined).map((e) => e.id);
  assert.deepEqual(got, want);
  assert.equal(asked.length, 2, 'one reconnect');
  assert.equal(asked[1], want[3], 'resumed after the last event it got');
});

test('dispatch over NATS: stored once per run id, run by the worker', async () => {
  const nats = await connectNats({ servers: j.natsUrl });
  try {
    const first = await nats.dispatch('js-call', { turns: 1 }, { runId: 'c-nats' });
    assert.equal(first.duplicate, false);
    const again = await nats.dispatch('js-call', { turns: 1 }, { runId: 'c-nats' });
    assert.equal(again.duplicate, true);
    assert.equal(again.seq, first.seq);
    const outcome = await (async () => {
      for (;;) { // the worker creates the row when it takes the dispatch
        try { return await client.await('c-nats'); } catch (err) { if (!(err instanceof APIError && err.status === 404)) throw err; }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    assert.equal(outcome.summary, 'w1');
    const fresh = await nats.dispatch('js-call', { turns: 1 });
    assert.match(fresh.runId, /^js-[0-9a-f-]{36}$/);
  } finally {
    await nats.close();
  }
});

test('rerun from a step: the steps before it are given back, the rest run again', async () => {
  const ledger = join(j.scratch(), 'ledger');
  await client.run('js-call', { turns: 5, ledger }, { runId: 'c-orig' });
  const row = await client.rerun('c-orig', { fromStep: 'think-3', runId: 'c-fork' });
  assert.equal(row.id, 'c-fork');
  assert.deepEqual(row.forkedFrom?.runId, 'c-orig');
  const outcome = await client.await('c-fork');
  assert.deepEqual(outcome.output.words, ['w1', 'w2', 'w3', 'w4', 'w5']);
  // The original ran five steps; the re-run ran steps 3 to 5 only.
  assert.deepEqual(counter(ledger), ['think-1 1', 'think-2 1', 'think-3 1', 'think-4 1', 'think-5 1', 'think-3 1', 'think-4 1', 'think-5 1']);
  const diff = await client.diff('c-orig', 'c-fork');
  assert.deepEqual(diff.steps.map((st) => `${st.name}:${st.verdict}`), ['think-1:equal', 'think-2:equal', 'think-3:equal', 'think-4:equal', 'think-5:equal']);
  assert.equal(diff.outputEqual, true);
  await assert.rejects(client.rerun('c-orig', { fromStep: 'no-such-step' }),
    (err) => err instanceof APIError && err.status === 422 && err.code === 'step_not_stored');
});

test('a wait is an ask: asks lists it, answer resumes the run, a second answer is refused', async () => {
  await client.dispatch('js-call', { turns: 1, wait: 'approve' }, { runId: 'c-ask' });
  const ask = await eventually(async () => (await client.asks({ status: 'open', runId: 'c-ask' })).asks[0], 'the ask');
  assert.deepEqual({ runId: ask.runId, via: ask.via, name: ask.name }, { runId: 'c-ask', via: 'signal', name: 'approve' });
  await client.answer(ask.id, { digest: ask.digest, value: { approved: true } });
  await assert.rejects(client.answer(ask.id, { digest: ask.digest, value: { approved: false } }),
    (err) => err instanceof APIError && err.status === 409 && err.code === 'already_answered');
  assert.deepEqual((await client.await('c-ask')).output.payload, { approved: true });
  assert.deepEqual((await client.asks({ status: 'open', runId: 'c-ask' })).asks, []);
});
