// The shared protocol fixtures (docs/protocol/fixtures, issue 39 item 5):
// each attempt's child verbs, called through this library with the
// attempt's request on stdin, write exactly the fixture's lines, read its
// answers, and return (or raise) what it says. The Go worker's and the
// Python library's tests read the same files.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { here } from './harness.mjs';
import { child, Failure } from '../index.js';

const dir = join(here, '..', '..', '..', 'docs', 'protocol', 'fixtures');
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();

/** Calls one fixture verb on run; a result or fail verb ends the handler. */
async function call(run, v, out) {
  const a = v.args ?? {};
  switch (v.verb) {
    case 'chunk': return run.chunk(a.data);
    case 'print': return out.write(`${a.text}\n`);
    case 'progress': {
      const { fraction, ...rest } = a;
      return run.progress(fraction, rest);
    }
    case 'milestone': return run.milestone(a.name, a.data);
    case 'usage': return run.usage(a);
    case 'step': {
      let ran = false;
      const got = await run.step(a.name, () => {
        ran = true;
        for (const u of a.usage ?? []) run.usage(u);
        return a.output;
      });
      assert.equal(ran, v.runs, `step ${a.name} ran: ${ran}`);
      return got;
    }
    case 'wait': return run.wait(a.signal, a.ask ? { ask: a.ask } : {});
    case 'call': return run.call(a.name, a.input, a.ask ? { ask: a.ask } : {});
    case 'reserve': return run.reserve(a);
    default: throw new Error(`unknown verb ${v.verb}`);
  }
}

test('the fixtures cover every verb and every line of docs/protocol.md', () => {
  const verbs = files.flatMap((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')).attempts.flatMap((at) => at.child));
  assert.deepEqual([...new Set(verbs.map((v) => v.verb))].sort(),
    ['call', 'chunk', 'fail', 'milestone', 'print', 'progress', 'reserve', 'result', 'step', 'usage', 'wait']);
  const keys = new Set(verbs.flatMap((v) => v.lines.flatMap((l) => Object.keys(l.out ?? {}))));
  assert.deepEqual([...keys].sort(),
    ['ask', 'call', 'chunk', 'error', 'milestone', 'progress', 'reserve', 'result', 'retryAfterMs', 'retryable', 'step', 'usage', 'wait']);
});

for (const file of files) {
  const fx = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  fx.attempts.forEach((attempt, i) => {
    test(`${file} attempt ${i + 1}: ${fx.description.split('.')[0]}`, async () => {
      const input = new PassThrough();
      const output = new PassThrough();
      let text = '';
      output.on('data', (b) => { text += b; });
      input.write(`${JSON.stringify(attempt.request)}\n`);
      const want = [];
      for (const v of attempt.child) {
        for (const l of v.lines) {
          if ('in' in l) input.write(`${JSON.stringify(l.in)}\n`);
          else want.push('out' in l ? { out: l.out } : { text: l.text });
        }
      }
      await child(async (run) => {
        assert.deepEqual(run.request, attempt.request);
        for (const v of attempt.child) {
          if (v.verb === 'result') return { summary: v.args.summary, output: v.args.output };
          if (v.verb === 'fail') throw new Failure(v.args.error, { retryable: v.args.retryable, retryAfterMs: v.args.retryAfterMs });
          if ('raises' in v) {
            await assert.rejects(call(run, v, output), (err) => err.reason === v.raises);
            continue;
          }
          const got = await call(run, v, output);
          if ('returns' in v) assert.deepEqual(got, v.returns, `${v.verb} returns`);
        }
        return undefined;
      }, { input, output });
      const lines = text.split('\n').filter(Boolean).map((l) => (l.startsWith('@jetrun ') ? { out: JSON.parse(l.slice(8)) } : { text: l }));
      assert.deepEqual(lines, want);
    });
  });
}
