// The README's ten-line TypeScript child works as written: tsc accepts it
// against the package's types, and compiled, it runs as an exec child of a
// real worker: its step is stored, it waits for the approval, and the run
// completes with its result.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Jetrun, eventually, here, node } from './harness.mjs';
import { Client } from '../index.js';

const root = join(here, '..');

function readmeChild() {
  const text = readFileSync(join(root, '..', '..', 'README.md'), 'utf8');
  const at = text.indexOf('A ten-line TypeScript child');
  assert.ok(at >= 0, 'README has no ten-line TypeScript child');
  const m = /```ts\n([\s\S]*?)```/.exec(text.slice(at));
  assert.ok(m, 'README has no ```ts block after "A ten-line TypeScript child"');
  return m[1];
}

let j;
after(async () => { await j?.close(); });

test("the README's ten-line TypeScript child type-checks, compiles and runs", async () => {
  const code = readmeChild();
  assert.ok(code.trim().split('\n').length <= 12, `the README's ten-line child has ${code.trim().split('\n').length} lines`);
  j = await Jetrun.start();
  const dir = j.scratch();
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(root, join(dir, 'node_modules', 'jetrun'));
  writeFileSync(join(dir, 'package.json'), '{"type": "module"}\n');
  writeFileSync(join(dir, 'wc.ts'), code);
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true,
      typeRoots: [join(root, 'node_modules', '@types')], types: ['node'] },
    files: ['wc.ts'],
  }));
  try {
    execFileSync(node, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], { encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc: ${err.stdout}${err.stderr}`);
  }
  await j.worker({ 'wc-ts': `${node} ${join(dir, 'wc.js')}` });
  const client = new Client({ url: j.url });
  await client.dispatch('wc-ts', { text: 'b a b c', approval: true }, { runId: 'ts-ten' });
  await eventually(async () => (await client.get('ts-ten')).waitingFor === 'approve', 'the approval wait');
  await client.signal('ts-ten', 'approve', { approved: true });
  const outcome = await client.await('ts-ten');
  assert.deepEqual([outcome.summary, outcome.output], ['most common: b', { a: 1, b: 2, c: 1 }]);
  const steps = [];
  for await (const ev of client.stream('ts-ten')) if (ev.event === 'step') steps.push(`${ev.data.data.name}@${ev.data.data.attempt}`);
  assert.deepEqual(steps, ['count@1']);
  assert.equal((await client.get('ts-ten')).milestones, 1);
});
