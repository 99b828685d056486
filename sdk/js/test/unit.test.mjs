// The child side's lines, checked without a worker: what a child writes for
// each verb, and a stored step returned without running its work again.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { child, childRunId, Failure, runSubAgent } from '../index.js';

/** Runs handler as a child fed with lines; answers what it wrote, decoded. */
async function exchange(request, handler, answers = []) {
  const input = new PassThrough();
  const output = new PassThrough();
  let text = '';
  output.on('data', (b) => { text += b; });
  input.write(`${JSON.stringify(request)}\n`);
  for (const a of answers) input.write(`${JSON.stringify(a)}\n`);
  await child(handler, { input, output });
  return text.split('\n').filter(Boolean).map((l) => (l.startsWith('@jetrun ') ? JSON.parse(l.slice(8)) : l));
}

const req = (extra = {}) => ({ runId: 'r1', agentType: 't', attempt: 1, input: {}, milestones: [], depth: 0, steps: {}, ...extra });

test('a stored step is given back without running its work; a new one is stored with its usage', async () => {
  let ran = 0;
  const lines = await exchange(req({ attempt: 2, steps: { 'plan-1': { q: ['tides'] } } }), async (run) => {
    const a = await run.step('plan-1', () => { ran++; return { q: ['other'] }; });
    const b = await run.step('plan-2', () => {
      ran++;
      run.usage({ inputTokens: 3, outputTokens: 2, model: 'm' });
      run.usage({ costMicros: 7 });
      return { at: new Date(0) };
    });
    const c = await run.step('plan-2', () => { ran++; return 'again'; });
    return { summary: 'ok', output: { a, b, c } };
  });
  assert.equal(ran, 1);
  assert.deepEqual(lines, [
    { step: { name: 'plan-2', output: { at: '1970-01-01T00:00:00.000Z' }, usage: [{ inputTokens: 3, outputTokens: 2, model: 'm' }, { costMicros: 7 }] } },
    { result: { summary: 'ok', output: { a: { q: ['tides'] }, b: { at: '1970-01-01T00:00:00.000Z' }, c: { at: '1970-01-01T00:00:00.000Z' } } } },
  ]);
});

test('chunk, progress, milestone, wait, call and a failure as lines', async () => {
  const lines = await exchange(req(), async (run) => {
    run.chunk('hello\n');
    run.chunk({ tokens: 3 });
    run.progress(0.5, { phase: 'reading' });
    run.milestone('read', { pages: 2 });
    assert.ok(run.reached('read'));
    const payload = await run.wait('approve');
    const out = await run.call('ask-user', { q: 1 });
    run.chunk({ payload, out });
    throw new Failure('try later', { retryAfterMs: 6000 });
  }, [{ signal: { name: 'approve', payload: { approved: true } } }, { reply: { name: 'ask-user', output: 'yes' } }]);
  assert.deepEqual(lines, [
    { chunk: 'hello\n' },
    { chunk: { tokens: 3 } },
    { progress: { fraction: 0.5, phase: 'reading' } },
    { milestone: { name: 'read', data: { pages: 2 } } },
    { wait: 'approve' },
    { call: { name: 'ask-user', input: { q: 1 } } },
    { chunk: { payload: { approved: true }, out: 'yes' } },
    { error: 'try later', retryable: true, retryAfterMs: 6000 },
  ]);
});

test('a wait stored as a step by an earlier attempt is not waited for again', async () => {
  const lines = await exchange(req({ attempt: 2, steps: { approval: { approved: false } } }), async (run) => {
    return { output: await run.step('approval', () => run.wait('approve')) };
  });
  assert.deepEqual(lines, [{ result: { summary: '', output: { approved: false } } }]);
});

test('a wait or a call that asks a person carries its ask', async () => {
  const ask = { kind: 'approve', title: 'send it?', payload: { to: 'team' } };
  const lines = await exchange(req(), async (run) => {
    const a = await run.wait('approve', { ask });
    const b = await run.call('ask-user', { q: 1 }, { ask: { kind: 'form', title: 'which?' } });
    return { output: [a, b] };
  }, [{ signal: { name: 'approve', payload: { approved: true } } }, { reply: { name: 'ask-user', output: 'this' } }]);
  assert.deepEqual(lines, [
    { wait: 'approve', ask },
    { call: { name: 'ask-user', input: { q: 1 }, ask: { kind: 'form', title: 'which?' } } },
    { result: { summary: '', output: [{ approved: true }, 'this'] } },
  ]);
});

test('reserve writes a reserve line and answers the reserved line', async () => {
  const lines = await exchange(req(), async (run) => {
    const a = await run.reserve({ inputTokens: 10, costMicros: 5 });
    const b = await run.reserve({ outputTokens: 3 });
    await assert.rejects(run.reserve({}), TypeError);
    return { output: [a, b] };
  }, [{ reserved: { ok: true } }, { reserved: { ok: false, reason: 'budget-exceeded', error: 'no room' } }]);
  assert.deepEqual(lines, [
    { reserve: { inputTokens: 10, costMicros: 5 } },
    { reserve: { outputTokens: 3 } },
    { result: { summary: '', output: [{ ok: true }, { ok: false, reason: 'budget-exceeded', error: 'no room' }] } },
  ]);
});

test('a failed call reply is a CallError; a bad step name a TypeError', async () => {
  const lines = await exchange(req(), async (run) => {
    await assert.rejects(run.step('no spaces', () => 1), TypeError);
    assert.throws(() => run.progress(2), RangeError);
    assert.throws(() => run.usage({ inputTokens: -1 }), TypeError);
    try {
      await run.call('ask-user');
    } catch (err) {
      return { summary: `${err.name}: ${err.reason}` };
    }
    return { summary: 'no error' };
  }, [{ reply: { name: 'ask-user', error: 'call timed out' } }]);
  assert.deepEqual(lines.at(-1), { result: { summary: 'CallError: call timed out' } });
});

test('childRunId is the id the Go worker gives a nested run (parent.RunID)', () => {
  // Values printed by Go's parent.RunID.
  assert.equal(childRunId('r1', 'call-7'), 'tc-cv438ssq273241f5m1lk7rrfbiors62p');
  assert.equal(childRunId('parent-x', 'task_research:1'), 'tc-dvuc9d5e3ajkicvfetnumbo27rpfp3oc');
});

test('a run under a session reads its earlier turns; a run without one has none', async () => {
  const turn = { runId: 'r0', status: 'completed', input: { objective: 'a' }, output: 'ok', steps: [{ name: 'heard', output: 'a' }] };
  const lines = await exchange(req({ session: 'notes', history: [turn] }), async (run) => ({ output: { session: run.session, history: run.history } }));
  assert.deepEqual(lines.at(-1).result.output, { session: 'notes', history: [turn] });
  const none = await exchange(req(), async (run) => ({ output: { session: run.session ?? null, n: run.history.length } }));
  assert.deepEqual(none.at(-1).result.output, { session: null, n: 0 });
});

test('variables are the input\'s with the stored changes in order; setVariable stores a step named as Go\'s', async () => {
  const steps = {
    'variables.1.10': { key: 'a', value: 10 }, 'variables.1.2': { key: 'a', value: 2 },
    'variables.1.3': { key: 'c', value: [3] }, plan: { key: 'b', value: 'not a variable' },
  };
  const lines = await exchange(req({ attempt: 2, input: { variables: { a: 1, b: 'x' } }, steps }), async (run) => {
    const before = run.variables();
    await run.setVariable('b', { y: 1 });
    await run.setVariable('d', null);
    return { output: [before, run.variables()] };
  });
  assert.deepEqual(lines, [
    { step: { name: 'variables.2.1', output: { key: 'b', value: { y: 1 } } } },
    { step: { name: 'variables.2.2', output: { key: 'd', value: null } } },
    { result: { summary: '', output: [{ a: 10, b: 'x', c: [3] }, { a: 10, b: { y: 1 }, c: [3], d: null }] } },
  ]);
});

test('runSubAgent passes the variables down and takes those the completed child changed', async () => {
  const inputs = [];
  const client = { // the HTTP API as runSubAgent uses it
    async run(agentType, input, opts) { inputs.push(input); return { runId: opts.runId, status: 'completed', output: 'done' }; },
    async *stream(runId, opts) {
      assert.equal(runId, childRunId('r1', 'c1'));
      assert.equal(opts.follow, false);
      const data = [
        { name: 'variables.1.1', output: { key: 'same', value: 1 } },
        { name: 'other', output: { key: 'x', value: 9 } },
        { name: 'variables.1.2', output: { key: 'new', value: 'v' } },
        { name: 'variables.1.3', output: null, error: 'boom' },
      ];
      for (const [i, d] of data.entries()) yield { id: String(i), event: 'step', data: { kind: 'step', data: d } };
      yield { event: 'history-end', data: {} };
    },
  };
  const subs = { delegates: [{ agentType: 'memo' }], client };
  const lines = await exchange(req(), async (run) => {
    await run.setVariable('same', 1);
    return { output: [await runSubAgent(run, subs, 'c1', 'task_memo', { objective: 'o' }), run.variables()] };
  });
  assert.deepEqual(inputs, [{ objective: 'o', variables: { same: 1 } }]);
  assert.deepEqual(lines, [
    { step: { name: 'variables.1.1', output: { key: 'same', value: 1 } } },
    { step: { name: 'variables.1.2', output: { key: 'new', value: 'v' } } },
    { result: { summary: '', output: ['done', { same: 1, new: 'v' }] } },
  ]);
});
