// The test harness: real jetrun processes. A parent-worker (embedded
// nats-server, HTTP API) and child-workers serving exec agent types, from
// the binaries in $JETRUN_BIN (the Go test that runs these builds them; by
// hand: `make build`, then JETRUN_BIN=$PWD/bin node --test sdk/js/test/).

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));

/** The directory with parent-worker and child-worker. */
export function binDir() {
  const dir = process.env.JETRUN_BIN;
  if (!dir || !existsSync(join(dir, 'parent-worker')) || !existsSync(join(dir, 'child-worker'))) {
    throw new Error(`JETRUN_BIN must name a directory with parent-worker and child-worker (make build; JETRUN_BIN=$PWD/bin), got ${JSON.stringify(dir)}`);
  }
  return dir;
}

/** Polls fn until it returns a truthy value, at most timeoutMs. */
export async function eventually(fn, what, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A process of the test, killed at the end. */
class Proc {
  constructor(name, cmd, env) {
    this.name = name;
    this.stderr = '';
    this.stdout = '';
    this.exited = false;
    this.child = spawn(cmd, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout.on('data', (b) => { this.stdout += b; });
    this.child.stderr.on('data', (b) => { this.stderr += b; });
    this.done = new Promise((resolve) => this.child.on('exit', (code, sig) => { this.exited = true; resolve({ code, sig }); }));
  }

  /** Waits for a log line containing s; returns the line. */
  async waitLog(s, timeoutMs = 60_000) {
    return eventually(() => {
      if (this.exited) throw new Error(`${this.name} exited: ${this.stderr}`);
      return this.stderr.split('\n').find((l) => l.includes(s));
    }, `${this.name} to log ${JSON.stringify(s)}`, timeoutMs);
  }

  /** kill -9, and waits until the process is gone. */
  async kill() {
    if (!this.exited) this.child.kill('SIGKILL');
    await this.done;
  }
}

function baseEnv(extra) {
  return { PATH: process.env.PATH, HOME: process.env.HOME ?? tmpdir(), ...extra };
}

/**
 * A jetrun for one test file: a parent-worker with its embedded server and
 * HTTP API; workers(...) starts child-workers on it. close() kills all.
 */
export class Jetrun {
  static async start() {
    const bin = binDir();
    const data = mkdtempSync(join(tmpdir(), 'jetrun-js-'));
    const j = new Jetrun(bin, data);
    const pw = j.#track(new Proc('parent-worker', join(bin, 'parent-worker'), baseEnv({
      JETRUN_DATA_DIR: data, JETRUN_EMBEDDED_PORT: '-1', JETRUN_HTTP_ADDR: '127.0.0.1:0', JETRUN_LEASE: '2s',
      JETRUN_RECONCILE_INTERVAL: '500ms', JETRUN_WORKER_ID: 'pw-js',
    })));
    const ready = await pw.waitLog('parent-worker ready');
    j.natsUrl = /nats=(\S+)/.exec(ready)[1];
    j.url = /http=(\S+)/.exec(ready)[1];
    return j;
  }

  constructor(bin, data) {
    this.bin = bin;
    this.data = data;
    this.procs = [];
    this.n = 0;
  }

  #track(p) {
    this.procs.push(p);
    return p;
  }

  /**
   * Starts a child-worker serving agents ({agentType: command line}) and
   * waits until it serves them.
   * @param {Record<string, string>} agents
   * @param {Record<string, string>} [env] more environment (not JETRUN_*: the worker keeps those from its commands)
   */
  async worker(agents, env = {}) {
    const id = `cw-js-${++this.n}`;
    const p = this.#track(new Proc(id, join(this.bin, 'child-worker'), baseEnv({
      JETRUN_NATS_URL: this.natsUrl, JETRUN_WORKER_ID: id, JETRUN_LEASE: '2s',
      JETRUN_EXEC_AGENTS: Object.entries(agents).map(([k, v]) => `${k}=${v}`).join(','),
      JETRUN_EXEC_GRACE: '1s', ...env,
    })));
    await p.waitLog('child-worker serving');
    return p;
  }

  /** A directory for one test's files, removed by close(). */
  scratch() {
    return mkdtempSync(join(this.data, 'scratch-'));
  }

  async close() {
    for (const p of this.procs) await p.kill();
    rmSync(this.data, { recursive: true, force: true });
  }
}

/** A file of lines a test child appends to (one per side effect), read back by the test. */
export function counter(path) {
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
}

/** The node binary running this test, for exec agents' command lines. */
export const node = process.execPath;
