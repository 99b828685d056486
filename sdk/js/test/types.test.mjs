// index.d.ts compiles and describes the package: tsc --noEmit over a
// TypeScript child and caller (test/types.ts), and every export it declares
// exists in index.js.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { here } from './harness.mjs';
import * as jetrun from '../index.js';

test('tsc --noEmit accepts a TypeScript child and caller', () => {
  const tsc = join(here, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    execFileSync(process.execPath, [tsc, '--noEmit', '-p', join(here, 'tsconfig.json')], { encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc: ${err.stdout}${err.stderr}`);
  }
});

test('every value index.d.ts declares is exported', () => {
  const dts = readFileSync(join(here, '..', 'index.d.ts'), 'utf8');
  const declared = [...dts.matchAll(/^export (?:class|function) (\w+)/gm)].map((m) => m[1]);
  assert.ok(declared.length >= 8);
  for (const name of declared) assert.equal(typeof jetrun[name], 'function', `${name} is declared but not exported`);
});
