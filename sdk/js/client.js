// The caller side over jetrun's HTTP API (docs/api.md): dispatch, await,
// stream (server-sent events, resumed with Last-Event-ID), cancel, signal,
// reply, answer an ask, re-run from a step.

import { checkToken } from './runid.js';

/** An answer of the HTTP API that is not a success: status, code and error text. */
export class APIError extends Error {
  /** @param {number} status @param {string} code @param {string} message */
  constructor(status, code, message) {
    super(`jetrun: HTTP ${status}${code ? ` ${code}` : ''}: ${message}`);
    this.name = 'APIError';
    this.status = status;
    this.code = code;
  }
}

/**
 * A run that did not complete: its status (error, aborted, interrupted), error,
 * and for interrupted, reason and whether it is retryable.
 */
export class RunFailure extends Error {
  /** @param {any} f the failure body */
  constructor(f) {
    super(`run ${f.runId} ${f.status}: ${f.error ?? ''}`);
    this.name = 'RunFailure';
    this.runId = f.runId;
    this.status = f.status;
    this.error = f.error ?? '';
    this.retryable = Boolean(f.retryable);
    this.reason = f.reason;
    this.childStillRunning = f.childStillRunning;
  }
}

const FINAL = new Set(['completed', 'error', 'aborted']);

/**
 * outcomeOf turns a final row into a run's outcome: {ok, runId, status,
 * summary, output} for a completed run; a RunFailure is thrown otherwise.
 * @param {any} row
 */
function outcomeOf(row) {
  if (row.status === 'completed') {
    return { ok: true, runId: row.id, status: row.status, summary: row.summary ?? '', output: row.output ?? null };
  }
  const f = { runId: row.id, status: row.status, error: row.error, retryable: false };
  if (row.status === 'interrupted') Object.assign(f, { retryable: Boolean(row.retryable), reason: row.reason, childStillRunning: Boolean(row.childStillRunning) });
  throw new RunFailure(f);
}

/** The body of POST /v1/runs from a dispatch's options. */
function dispatchBody(agentType, input, opts) {
  checkToken('agent type', agentType);
  if (input === undefined || input === null) throw new TypeError('a run needs an input (any JSON value but null)');
  if (opts.runId !== undefined) checkToken('run id', opts.runId);
  const body = { agentType, input };
  for (const k of ['runId', 'parent', 'parentToolCallId', 'displayOrder', 'depth', 'detached', 'maxConcurrent',
    'concurrencyKey', 'strategy', 'debounceMs', 'budget', 'session']) {
    if (opts[k] !== undefined) body[k] = opts[k];
  }
  return body;
}

/** Client calls jetrun's HTTP API with fetch. */
export class Client {
  /**
   * @param {{url?: string, token?: string, fetch?: typeof fetch, reconnectDelayMs?: number, maxReconnects?: number}} [opts]
   *   url: the API's base (default $JETRUN_URL, else http://127.0.0.1:8080); token: a bearer token
   */
  constructor(opts = {}) {
    this.url = (opts.url ?? process.env.JETRUN_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
    this.token = opts.token ?? process.env.JETRUN_TOKEN;
    this.fetch = opts.fetch ?? globalThis.fetch;
    this.reconnectDelayMs = opts.reconnectDelayMs ?? 500;
    this.maxReconnects = opts.maxReconnects ?? 10;
  }

  #headers(extra = {}) {
    const h = { Accept: 'application/json', ...extra };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    return h;
  }

  /**
   * One request; answers the decoded JSON body, or throws an APIError.
   * @param {string} method @param {string} path @param {unknown} [body] @param {{signal?: AbortSignal}} [opts]
   */
  async request(method, path, body, opts = {}) {
    const init = { method, headers: this.#headers(body === undefined ? {} : { 'Content-Type': 'application/json' }), signal: opts.signal };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await this.fetch(this.url + path, init);
    const text = await res.text();
    let data = null;
    try {
      data = text === '' ? null : JSON.parse(text);
    } catch {
      data = { error: text };
    }
    if (!res.ok) throw new APIError(res.status, data?.code ?? '', data?.error ?? text);
    return data;
  }

  /**
   * Dispatches a run and answers its row (201 for a new run; the same id
   * again re-attaches and answers the existing row).
   * @param {string} agentType @param {unknown} input @param {object} [opts]
   */
  async dispatch(agentType, input, opts = {}) {
    return this.request('POST', '/v1/runs', dispatchBody(agentType, input, opts), opts);
  }

  /**
   * Dispatches a run (or re-attaches to it by runId) and waits for its
   * outcome: {ok: true, runId, status: "completed", summary, output}, or a
   * RunFailure thrown.
   * @param {string} agentType @param {unknown} input @param {object} [opts]
   */
  async run(agentType, input, opts = {}) {
    const out = await this.request('POST', '/v1/runs?wait=true', dispatchBody(agentType, input, opts), opts);
    if (!out.ok) throw new RunFailure(out);
    return out;
  }

  /** The run's row (404: APIError). @param {string} runId @param {{signal?: AbortSignal}} [opts] */
  async get(runId, opts = {}) {
    checkToken('run id', runId);
    return this.request('GET', `/v1/runs/${runId}`, undefined, opts);
  }

  /**
   * Waits for a run to end and answers its outcome as run does: it follows
   * the run's events to their end (resuming over dropped connections), then
   * reads the row. A run given up (interrupted) ends the wait too.
   * @param {string} runId @param {{signal?: AbortSignal}} [opts]
   */
  async await(runId, opts = {}) {
    const row = await this.get(runId, opts);
    if (!FINAL.has(row.status)) {
      for await (const ev of this.stream(runId, { signal: opts.signal })) void ev; // to its end
    }
    return outcomeOf(await this.get(runId, opts));
  }

  /**
   * The run's events as server-sent events: {id, event, data} with event the
   * kind (status, chunk, progress, milestone, signal, step, call, reply,
   * child-chunk), then "caught-up" once the stored history is sent; the
   * iteration ends with the run ("end"). A dropped connection is opened again
   * with Last-Event-ID: no event is lost or repeated.
   * @param {string} runId
   * @param {{after?: string, follow?: boolean, signal?: AbortSignal}} [opts] after: resume after this event id
   * @returns {AsyncGenerator<{id?: string, event: string, data: any}>}
   */
  async *stream(runId, opts = {}) {
    checkToken('run id', runId);
    let last = opts.after;
    let failures = 0;
    const query = opts.follow === false ? '?follow=false' : '';
    for (;;) {
      const headers = this.#headers({ Accept: 'text/event-stream' });
      if (last !== undefined) headers['Last-Event-ID'] = String(last);
      let res;
      try {
        res = await this.fetch(`${this.url}/v1/runs/${runId}/events${query}`, { headers, signal: opts.signal });
      } catch (err) {
        if (opts.signal?.aborted || ++failures > this.maxReconnects) throw err;
        await delay(this.reconnectDelayMs);
        continue;
      }
      if (!res.ok) {
        const text = await res.text();
        let data = {};
        try { data = JSON.parse(text); } catch { data = { error: text }; }
        if (res.status >= 500 && ++failures <= this.maxReconnects) {
          await delay(this.reconnectDelayMs);
          continue;
        }
        throw new APIError(res.status, data.code ?? '', data.error ?? text);
      }
      try {
        for await (const ev of parseSSE(res.body)) {
          failures = 0;
          if (ev.id !== undefined) last = ev.id;
          yield ev;
          if (ev.event === 'end' || ev.event === 'history-end') return;
        }
      } catch (err) {
        if (opts.signal?.aborted || ++failures > this.maxReconnects) throw err;
      }
      // The stream ended without "end": the connection dropped. Resume.
      await delay(this.reconnectDelayMs);
    }
  }

  /** Cancels a run; answers its row. @param {string} runId @param {string} [reason] */
  async cancel(runId, reason) {
    checkToken('run id', runId);
    return this.request('POST', `/v1/runs/${runId}/cancel`, reason ? { reason } : {});
  }

  /** Sends a signal to a run (409 once it ended). @param {string} runId @param {string} name @param {unknown} [payload] */
  async signal(runId, name, payload = {}) {
    checkToken('run id', runId);
    checkToken('signal name', name);
    return this.request('POST', `/v1/runs/${runId}/signals/${name}`, payload);
  }

  /** The run's calls: pending, answered, failed. @param {string} runId */
  async calls(runId) {
    checkToken('run id', runId);
    return this.request('GET', `/v1/runs/${runId}/calls`);
  }

  /**
   * Answers a run's call by hand: {output} or {error}.
   * @param {string} runId @param {number} seq @param {{output?: unknown, error?: string}} answer
   */
  async reply(runId, seq, answer) {
    checkToken('run id', runId);
    return this.request('POST', `/v1/runs/${runId}/calls/${seq}/reply`, answer);
  }

  /**
   * Answers an ask (POST /v1/asks/{id}:answer): the digest of the payload
   * shown, and the value (for an approval, the signal's payload). The first
   * answer wins; a second gets an APIError 409.
   * @param {string} askId @param {{digest: string, value: unknown, by?: string}} answer
   */
  async answer(askId, answer) {
    if (typeof askId !== 'string' || askId === '') throw new TypeError('answer needs an ask id');
    return this.request('POST', `/v1/asks/${encodeURIComponent(askId)}:answer`, answer);
  }

  /** The asks, e.g. {status: "open"} (GET /v1/asks). @param {Record<string, string>} [filter] */
  async asks(filter = {}) {
    const q = new URLSearchParams(filter).toString();
    return this.request('GET', `/v1/asks${q ? `?${q}` : ''}`);
  }

  /**
   * Re-runs a run from one of its steps (POST /v1/runs/{id}:rerun): a new
   * run whose steps before fromStep are given back stored (its row's
   * forkedFrom says which); answers its row.
   * @param {string} runId @param {{fromStep: string, input?: unknown, steps?: Record<string, unknown>, runId?: string, budget?: object}} opts
   */
  async rerun(runId, opts) {
    checkToken('run id', runId);
    return this.request('POST', `/v1/runs/${runId}:rerun`, opts);
  }

  /**
   * Compares two runs step by step (GET /v1/runs/{a}/diff/{b}).
   * @param {string} a @param {string} b
   */
  async diff(a, b) {
    checkToken('run id', a);
    checkToken('run id', b);
    return this.request('GET', `/v1/runs/${a}/diff/${b}`);
  }
}

/** @param {number} ms */
function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Parses a text/event-stream body into events.
 * @param {ReadableStream<Uint8Array>} body
 */
export async function* parseSSE(body) {
  const decoder = new TextDecoder();
  let buf = '';
  let ev = { data: '' };
  let hasData = false;
  for await (const bytes of body) {
    buf += decoder.decode(bytes, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (hasData) {
          let data = ev.data;
          try { data = JSON.parse(ev.data); } catch { /* keep the text */ }
          yield { ...(ev.id !== undefined ? { id: ev.id } : {}), event: ev.event ?? 'message', data };
        }
        ev = { data: '' };
        hasData = false;
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') {
        ev.data = hasData ? `${ev.data}\n${value}` : value;
        hasData = true;
      } else if (field === 'id') ev.id = value;
      else if (field === 'event') ev.event = value;
    }
  }
}
