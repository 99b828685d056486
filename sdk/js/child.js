// The child side: a run served by the exec agent type, over the line protocol
// of docs/protocol.md ("Write a child in another language"). The worker
// writes the request as the first line of stdin, then a line per signal or
// call reply; the child writes events as "@jetrun <json>" lines on stdout.

import { AsyncLocalStorage } from 'node:async_hooks';
import { childRunId, checkToken } from './runid.js';

const MARKER = '@jetrun ';
const STEP_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * A failure the run ends with: {"error": message, "retryable": …}. Throw it
 * from a handler; any other error thrown ends the run "error", not retried.
 */
export class Failure extends Error {
  /**
   * @param {string} message
   * @param {{retryable?: boolean, retryAfterMs?: number, cause?: unknown}} [opts]
   */
  constructor(message, opts = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'Failure';
    this.retryable = Boolean(opts.retryable || opts.retryAfterMs);
    this.retryAfterMs = opts.retryAfterMs ?? 0;
  }
}

/** The error reply to a call: the caller's handler failed or the call timed out. */
export class CallError extends Error {
  /** @param {string} name @param {string} message */
  constructor(name, message) {
    super(`call ${name}: ${message}`);
    this.name = 'CallError';
    this.call = name;
    this.reason = message;
  }
}

/** Lines is stdin read line by line on demand, never to its end. */
class Lines {
  /** @param {NodeJS.ReadableStream} input */
  constructor(input) {
    this.buf = '';
    this.queue = [];
    this.waiters = [];
    this.ended = false;
    input.setEncoding?.('utf8');
    input.on('data', (s) => {
      this.buf += s;
      let i;
      while ((i = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, i).trim();
        this.buf = this.buf.slice(i + 1);
        if (line !== '') this.push(line);
      }
    });
    input.on('end', () => {
      if (this.buf.trim() !== '') this.push(this.buf.trim());
      this.buf = '';
      this.ended = true;
      for (const w of this.waiters.splice(0)) w.reject(new Error('jetrun: stdin closed: the worker stopped the run'));
    });
    this.input = input;
  }

  push(line) {
    const w = this.waiters.shift();
    if (w) w.resolve(line);
    else this.queue.push(line);
  }

  /** @returns {Promise<string>} the next line */
  next() {
    if (this.queue.length > 0) return Promise.resolve(this.queue.shift());
    if (this.ended) return Promise.reject(new Error('jetrun: stdin closed: the worker stopped the run'));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** Stops reading, so the process can exit. */
  close() {
    this.input.pause?.();
    this.input.destroy?.();
  }
}

/** @param {unknown} v */
function toJSON(v) {
  return v === undefined ? null : JSON.parse(JSON.stringify(v));
}

/**
 * checkUsage returns a usage report in the line protocol's shape.
 * @param {any} u
 */
function checkUsage(u) {
  if (u === null || typeof u !== 'object') throw new TypeError('usage must be an object');
  const out = {};
  for (const k of ['inputTokens', 'outputTokens', 'costMicros']) {
    if (u[k] === undefined || u[k] === null) continue;
    if (!Number.isInteger(u[k]) || u[k] < 0) throw new TypeError(`usage.${k} must be an integer >= 0, got ${u[k]}`);
    if (u[k] > 0) out[k] = u[k];
  }
  if (u.model !== undefined && u.model !== null && u.model !== '') {
    if (typeof u.model !== 'string' || Buffer.byteLength(u.model) > 128) throw new TypeError('usage.model must be a string of at most 128 bytes');
    out.model = u.model;
  }
  if (u.answeredAtMs !== undefined && u.answeredAtMs !== null) {
    if (!Number.isInteger(u.answeredAtMs) || u.answeredAtMs < 0) throw new TypeError(`usage.answeredAtMs must be Unix ms, an integer >= 0, got ${u.answeredAtMs}`);
    if (u.answeredAtMs > 0) out.answeredAtMs = u.answeredAtMs;
  }
  return out;
}

/** Prefixes the names of the steps that set variables. */
export const VARIABLE_PREFIX = 'variables.';

/** [attempt, n] of a variable step's name variables.<attempt>.<n>, or undefined. */
function variableOrder(name) {
  const m = /^variables\.(\d+)\.(\d+)$/.exec(name);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/**
 * The variables steps ([name, output] pairs) set, in the order given (the
 * last assignment of a key wins), and the keys in the order first set.
 * @param {[string, any][]} steps
 */
export function variableChanges(steps) {
  const vars = Object.create(null);
  const keys = [];
  for (const [name, out] of steps) {
    if (!name.startsWith(VARIABLE_PREFIX) || out === null || typeof out !== 'object' || !out.key) continue;
    if (!Object.hasOwn(vars, out.key)) keys.push(out.key);
    vars[out.key] = out.value ?? null;
  }
  return { vars, keys };
}

/**
 * Run is one attempt of a run, as a child sees it.
 */
export class Run {
  /**
   * @param {any} request the request line, decoded
   * @param {{write: (s: string) => void, lines?: Lines, client?: any}} io
   */
  constructor(request, io) {
    this.request = request;
    this.#write = io.write;
    this.#lines = io.lines;
    this.#client = io.client;
    this.#stored = new Map(Object.entries(request.steps ?? {}));
  }

  #write;
  #lines;
  #client;
  #stored;
  #inStep = new AsyncLocalStorage();
  #exchange = Promise.resolve(); // waits and calls, one at a time
  #varN = 0; // the variables this attempt set (their step names)

  /** The run id. */
  get id() { return this.request.runId; }
  /** The agent type. */
  get agentType() { return this.request.agentType; }
  /** 1 for the first attempt, + 1 at every takeover or retry. */
  get attempt() { return this.request.attempt; }
  /** The run's input. */
  get input() { return this.request.input; }
  /** The milestones reached so far, by earlier attempts too. */
  get milestones() { return this.request.milestones ?? []; }
  /** The parent run's id, for a nested run. */
  get parent() { return this.request.parent; }
  /** How deep the run is nested (0 for a top-level run). */
  get depth() { return this.request.depth ?? 0; }
  /** The sub-agent session the run is a turn of (the dispatch's "session"), if any. */
  get session() { return this.request.session; }
  /** The session's earlier turns, oldest first, with their input, output and steps. */
  get history() { return this.request.history ?? []; }

  /**
   * Whether a milestone of that name was reached, by this attempt or an earlier one.
   * @param {string} name
   */
  reached(name) {
    return this.milestones.some((m) => m.name === name);
  }

  /** @param {object} event */
  #emit(event) {
    this.#write(MARKER + JSON.stringify(event) + '\n');
  }

  /**
   * A chunk of output; strings stay strings.
   * @param {unknown} data
   */
  chunk(data) {
    this.#emit({ chunk: toJSON(data) });
  }

  /**
   * Progress: fraction in 0..1, with an optional phase, message and data.
   * @param {number} fraction
   * @param {{phase?: string, message?: string, data?: unknown}} [opts]
   */
  progress(fraction, opts = {}) {
    if (typeof fraction !== 'number' || !(fraction >= 0 && fraction <= 1)) throw new RangeError(`progress fraction must be in 0..1, got ${fraction}`);
    this.#emit({ progress: { fraction, ...opts } });
  }

  /**
   * A durable milestone, numbered across attempts.
   * @param {string} name
   * @param {unknown} [data]
   */
  milestone(name, data) {
    if (typeof name !== 'string' || name === '' || Buffer.byteLength(name) > 256) throw new TypeError('milestone name must be 1 to 256 bytes');
    this.request.milestones = [...this.milestones, { sequence: this.milestones.length + 1, name, data: toJSON(data) }];
    this.#emit({ milestone: data === undefined ? { name } : { name, data: toJSON(data) } });
  }

  /**
   * Reports what the run spent. Inside a step's function it is that step's:
   * stored with the step and counted once, whatever dies when. answeredAtMs
   * is when the provider answered the model call (Date.now() once the answer
   * is in): a provider limit then counts a call granted at a window's very
   * end in the window the provider counted it in.
   * @param {{inputTokens?: number, outputTokens?: number, costMicros?: number, model?: string, answeredAtMs?: number}} u
   */
  usage(u) {
    const report = checkUsage(u);
    const step = this.#inStep.getStore();
    if (step) step.usage.push(report);
    else this.#emit({ usage: report });
  }

  /**
   * A durable step: the output stored by an earlier attempt (or earlier in
   * this one), else fn's, stored before it is returned. The value returned
   * is the JSON round trip of fn's, the same either way.
   * @template T
   * @param {string} name 1 to 128 bytes of letters, digits, - _ . :
   * @param {() => T | Promise<T>} fn
   * @returns {Promise<T>}
   */
  async step(name, fn) {
    if (typeof name !== 'string' || !STEP_NAME.test(name)) {
      throw new TypeError(`step name must be 1 to 128 characters of letters, digits, -, _, . and :, got ${JSON.stringify(name)}`);
    }
    if (this.#stored.has(name)) return structuredClone(this.#stored.get(name));
    const frame = { usage: [] };
    const output = toJSON(await this.#inStep.run(frame, fn));
    if (this.#stored.has(name)) return structuredClone(this.#stored.get(name)); // two at once: the first stored wins
    this.#stored.set(name, output);
    // What the step spent rides on its line (one report, or an array of
    // several): stored with the step in one write, whatever dies when.
    const step = { name, output };
    if (frame.usage.length === 1) step.usage = frame.usage[0];
    else if (frame.usage.length > 1) step.usage = frame.usage;
    this.#write(MARKER + JSON.stringify({ step }) + '\n');
    return structuredClone(output);
  }

  /**
   * The run's variables: the input's "variables" object with the changes
   * the run made (setVariable, and its completed sub-agents'), earlier
   * attempts' included (docs/protocol.md, "Sub-agents").
   * @returns {Record<string, any>}
   */
  variables() {
    const inp = this.input;
    const given = inp !== null && typeof inp === 'object' && inp.variables !== null && typeof inp.variables === 'object' ? inp.variables : {};
    const steps = [...this.#stored].filter(([name]) => variableOrder(name)).sort(([a], [b]) => {
      const [x, y] = [variableOrder(a), variableOrder(b)];
      return x[0] - y[0] || x[1] - y[1];
    });
    return structuredClone({ ...given, ...variableChanges(steps).vars });
  }

  /**
   * Sets the run's variable key to value, stored as a durable step
   * variables.<attempt>.<n> ({key, value}), so a later attempt sees it; a
   * sub-agent's caller gets the variables it changed once it completes.
   * @param {string} key @param {unknown} value
   */
  async setVariable(key, value) {
    if (typeof key !== 'string' || key === '') throw new TypeError('setVariable needs a key');
    const n = ++this.#varN;
    await this.step(`${VARIABLE_PREFIX}${this.attempt ?? 1}.${n}`, () => ({ key, value: toJSON(value) ?? null }));
  }

  /** @internal The client a sub-agent call of run uses: client, else the one run was served with. */
  static clientOf(run, client) {
    return client ?? run.#client;
  }

  /** Names and outputs of the steps stored so far. */
  get steps() {
    return Object.fromEntries(this.#stored);
  }

  /**
   * Runs one exchange (a wait or a call) at a time: the worker parks the
   * run on each and answers it on stdin.
   * @param {object} event
   * @returns {Promise<any>} the answer line, decoded
   */
  #ask(event) {
    const turn = this.#exchange.then(async () => {
      if (!this.#lines) throw new Error('jetrun: this run has no stdin to hear answers on');
      this.#emit(event);
      return JSON.parse(await this.#lines.next());
    });
    this.#exchange = turn.catch(() => {});
    return turn;
  }

  /**
   * Waits for the signal name and returns its payload. The worker parks the
   * run meanwhile. An attempt that takes the run over waits again (the
   * signal was received already): record a milestone once you acted on it,
   * or store the payload as a step — run.step('approval', () => run.wait('approve')).
   * With opts.ask the wait says what it asks a person (issue 37's asks:
   * {kind: "approve" | "choose" | "form", title, payload, choices, schema,
   * deadlineMs, default}), so the inbox (GET /v1/asks) shows it; a worker
   * without asks ignores it.
   * @param {string} name
   * @param {{ask?: object}} [opts]
   * @returns {Promise<any>}
   */
  async wait(name, opts = {}) {
    checkToken('signal name', name);
    const answer = await this.#ask(opts.ask ? { wait: name, ask: toJSON(opts.ask) } : { wait: name });
    if (!answer.signal) throw new Error(`jetrun: waited for signal ${name}, got ${JSON.stringify(answer)}`);
    return answer.signal.payload ?? null;
  }

  /**
   * Asks the run's caller (see Calls in docs/protocol.md) and returns the
   * reply's output; a failed reply throws a CallError. Durable: an attempt
   * that makes the same call again gets the stored reply.
   * With opts.ask the call is meant for a person and says what it asks
   * (as wait's).
   * @param {string} name
   * @param {unknown} [input]
   * @param {{ask?: object}} [opts]
   * @returns {Promise<any>}
   */
  async call(name, input, opts = {}) {
    checkToken('call name', name);
    const c = input === undefined ? { name } : { name, input: toJSON(input) };
    if (opts.ask) c.ask = toJSON(opts.ask);
    const answer = await this.#ask({ call: c });
    const reply = answer.reply;
    if (!reply) throw new Error(`jetrun: made call ${name}, got ${JSON.stringify(answer)}`);
    if (reply.error) throw new CallError(name, reply.error);
    return reply.output ?? null;
  }

  /**
   * Holds spend against the run tree's budget before it is paid (a model
   * call's worst case): the next usage report settles it, the end of the
   * attempt releases what none settled. Answers {ok: true}, or {ok: false,
   * reason: "budget-exceeded", error} when it does not fit: an answer, not
   * the end of the run. With amount.limit it also waits for room on that
   * provider limit, shared by the fleet (an empty amount then holds one
   * request and one call slot); a limit no one configured is refused with
   * reason "unknown-limit".
   * @param {{inputTokens?: number, outputTokens?: number, costMicros?: number, limit?: string}} amount
   * @returns {Promise<{ok: boolean, reason?: string, error?: string}>}
   */
  async reserve(amount) {
    const u = checkUsage({ ...amount, model: undefined });
    if (amount.limit !== undefined) {
      checkToken('limit name', amount.limit);
      u.limit = amount.limit;
    } else if (Object.keys(u).length === 0) {
      throw new TypeError('a reservation must hold some tokens or cost, or name a limit');
    }
    const answer = await this.#ask({ reserve: u });
    if (!answer.reserved) throw new Error(`jetrun: made a reservation, got ${JSON.stringify(answer)}`);
    return answer.reserved;
  }

  /**
   * Runs agentType as a nested run of this one and returns its outcome (see
   * Client.run). Its id is derived from this run's id and callId, so an
   * attempt that takes this run over re-attaches to the same nested run, or
   * gets its stored outcome: it never starts a second one.
   * @param {string} agentType
   * @param {unknown} input
   * @param {{callId: string, client?: any, displayOrder?: number}} opts
   */
  async runChild(agentType, input, opts) {
    const client = opts.client ?? this.#client;
    if (!client) throw new Error('jetrun: runChild needs a Client (child(handler, {client}) or opts.client)');
    if (typeof opts.callId !== 'string' || opts.callId === '') throw new TypeError('runChild needs a callId');
    const callId = opts.displayOrder ? `${opts.callId}#${opts.displayOrder}` : opts.callId;
    return client.run(agentType, input, {
      runId: childRunId(this.id, callId), parent: this.id, parentToolCallId: opts.callId,
      displayOrder: opts.displayOrder ?? 0, depth: this.depth + 1, session: opts.session,
    });
  }
}

/**
 * Serves one run of the exec agent type: reads the request from stdin,
 * calls handler(run), and writes its result — {summary, output}, or
 * undefined for an empty one — or the failure it throws. Resolves when the
 * outcome is written; the process then exits on its own.
 * @param {(run: Run) => Promise<{summary?: string, output?: unknown} | void>} handler
 * @param {{input?: NodeJS.ReadableStream, output?: NodeJS.WritableStream, client?: any}} [opts]
 */
export async function child(handler, opts = {}) {
  const out = opts.output ?? process.stdout;
  const lines = new Lines(opts.input ?? process.stdin);
  const write = (s) => { out.write(s); };
  let request;
  try {
    request = JSON.parse(await lines.next());
  } catch (err) {
    lines.close();
    throw new Error(`jetrun: no request on stdin (run this as an exec agent): ${err.message}`);
  }
  const run = new Run(request, { write, lines, client: opts.client });
  let event;
  try {
    const res = (await handler(run)) ?? {};
    event = { result: { summary: res.summary ?? '', ...(res.output === undefined ? {} : { output: toJSON(res.output) }) } };
  } catch (err) {
    if (err instanceof Failure) {
      event = { error: err.message, retryable: err.retryable, ...(err.retryAfterMs ? { retryAfterMs: err.retryAfterMs } : {}) };
    } else {
      event = { error: String(err?.message ?? err), retryable: false };
    }
  }
  await new Promise((resolve) => out.write(MARKER + JSON.stringify(event) + '\n', resolve));
  lines.close();
}
