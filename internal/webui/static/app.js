// jetrun web UI: a runs list with live updates and a run page whose timeline
// is rebuilt by replaying the run's events. Plain ES modules, no build step.
//
// Data flow:
//   GET /v1/runs/live (SSE)         every row change → list rows, run header, children
//   <script id="runs-snapshot">     the list's first page, embedded in the page at / (first paint)
//   GET /v1/runs?…                  the list, refetched whenever the live stream (re)opens
//   GET /v1/runs/{id}               the full row (input, output)
//   GET /v1/runs/{id}/events (SSE)  the timeline: history, then live; "end" closes it

const STATUSES = ['queued', 'starting', 'running', 'completed', 'error', 'aborted', 'interrupted'];
const FINAL = new Set(['completed', 'error', 'aborted']);

// ---------------------------------------------------------------- helpers

/** h builds an element: h('div', {class: 'x', onclick: fn}, child, 'text', …). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** put replaces el's children, skipping null, undefined and false. */
function put(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

function setText(el, text) {
  text = text ?? '';
  if (el.textContent !== text) el.textContent = text;
}

function setAttr(el, name, value) {
  if (value === undefined || value === null || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else if (el.getAttribute(name) !== String(value)) {
    el.setAttribute(name, String(value));
  }
}

/** parseTime turns an RFC 3339 timestamp into milliseconds (NaN if absent). */
function parseTime(s) {
  if (!s || s.startsWith('0001-')) return NaN;
  return Date.parse(s);
}

/** timeKey orders RFC 3339 timestamps to the nanosecond, as the server does. */
function timeKey(s) {
  const m = /^(.*?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(s || '');
  if (!m) return '';
  const secs = Math.floor(Date.parse(m[1] + m[3]) / 1000);
  return String(secs).padStart(12, '0') + (m[2] || '').padEnd(9, '0').slice(0, 9);
}

const pad = (n, w = 2) => String(n).padStart(w, '0');

function fmtAbs(ms) {
  if (!Number.isFinite(ms)) return '';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function fmtClock(ms) {
  if (!Number.isFinite(ms)) return '—';
  const d = new Date(ms);
  const today = new Date();
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

/** fmtDur formats a duration compactly: 850ms, 4.2s, 3m 04s, 2h 05m, 3d 4h. */
function fmtDur(ms) {
  if (!Number.isFinite(ms)) return '—';
  ms = Math.max(0, ms);
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.floor(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad(Math.floor(s % 60))}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${pad(m % 60)}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

function fmtAgo(ms) {
  if (!Number.isFinite(ms)) return '—';
  const d = Date.now() - ms;
  if (d < 5000) return 'just now';
  return `${fmtDur(d).replace(/\.\d/, '')} ago`;
}

/** fmtOffset formats a timeline offset: +1.234s, +2m03.456s, +1h02m03s. */
function fmtOffset(ms) {
  ms = Math.max(0, ms);
  const s = ms / 1000;
  if (s < 60) return `+${s.toFixed(3)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `+${m}m${(s % 60).toFixed(3).padStart(6, '0')}s`;
  return `+${Math.floor(m / 60)}h${pad(m % 60)}m${pad(Math.floor(s % 60))}s`;
}

function fmtJSON(v, indent) {
  try {
    return JSON.stringify(v, null, indent);
  } catch {
    return String(v);
  }
}

function pct(f) {
  return `${Math.round(Math.min(1, Math.max(0, f || 0)) * 100)}%`;
}

/** isLive reports whether a run may still change and can be cancelled. */
function isLive(run) {
  return run.status === 'starting' || run.status === 'running' ||
    (run.status === 'interrupted' && !!run.childStillRunning);
}

/** runDuration is how long the run ran (or has been running). */
function runDuration(run) {
  const start = parseTime(run.startedAt);
  if (!Number.isFinite(start)) return NaN;
  const end = parseTime(run.finishedAt);
  if (Number.isFinite(end)) return end - start;
  return isLive(run) ? Date.now() - start : NaN;
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(message, code, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    throw new ApiError(`cannot reach the server: ${err.message}`, 'network', 0);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text for the error
  }
  if (!res.ok) {
    const msg = (data && data.error) || text.trim() || res.statusText;
    if (res.status === 401) askToken();
    throw new ApiError(msg, (data && data.code) || `http_${res.status}`, res.status);
  }
  return data;
}

// askToken asks once for an API token when the server wants one
// (JETRUN_HTTP_TOKENS). POST /v1/session keeps it in an HttpOnly,
// SameSite=Strict cookie for this browser session; the page then reloads
// with it, the live stream included.
let askingToken = false;
function askToken() {
  if (askingToken) return;
  askingToken = true;
  const input = h('input', { type: 'password', name: 'token', autocomplete: 'current-password', required: true,
    'aria-label': 'API token', 'data-testid': 'token-input' });
  const problem = h('p', { class: 'token-problem', role: 'alert' });
  const form = h('form', { class: 'token-form' },
    h('h2', { text: 'This jetrun needs an API token' }),
    h('p', { text: 'Enter a read or write token from JETRUN_HTTP_TOKENS. It is kept for this browser session only.' }),
    input, problem,
    h('button', { type: 'submit', text: 'Continue', 'data-testid': 'token-submit' }));
  const dialog = h('dialog', { class: 'token-dialog', 'data-testid': 'token-dialog' }, form);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let res;
    try {
      res = await fetch('/v1/session', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: input.value }) });
    } catch (err) {
      problem.textContent = `cannot reach the server: ${err.message}`;
      return;
    }
    if (res.ok) {
      location.reload();
      return;
    }
    problem.textContent = res.status === 401 ? 'That token is not valid.' : `The server answered ${res.status}.`;
    input.select();
  });
  document.body.append(dialog);
  dialog.showModal();
  input.focus();
}

function toast(title, detail, kind = 'error') {
  const el = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status', title: 'Dismiss' },
    h('b', { text: title }), detail ? h('span', { text: detail }) : null);
  el.addEventListener('click', () => el.remove());
  document.getElementById('toasts').append(el);
  setTimeout(() => el.remove(), kind === 'error' ? 12000 : 5000);
}

function showError(what, err) {
  const detail = err instanceof ApiError && err.code && !err.code.startsWith('http_') && err.code !== 'network'
    ? `${err.message} (${err.code})` : err.message;
  toast(what, detail);
}

// ---------------------------------------------------------------- live runs hub

/**
 * LiveRuns is this tab's view of /v1/runs/live. Subscribers get onOpen (the
 * stream is open: fetch what you show now, updates will follow), onRun(summary),
 * onRemoved(id) and onDown (the stream broke).
 *
 * Every tab shares one stream through a shared worker (live-worker.js):
 * browsers allow six HTTP/1.1 connections per host, and each open stream
 * holds one. Without shared workers, the tab opens its own EventSource.
 */
class LiveRuns {
  constructor() {
    this.subs = new Set();
    this.port = null;
    this.es = null;
    this.open = false;
    this.retry = null;
    this.hello = null;
    this.noWorker = !window.SharedWorker;
    this.indicator = document.getElementById('conn');
  }

  subscribe(sub) {
    this.subs.add(sub);
    this.start();
    if (this.open) queueMicrotask(() => this.subs.has(sub) && sub.onOpen?.());
    return () => this.subs.delete(sub);
  }

  start() {
    if (this.port || this.es || this.retry) return;
    if (!this.noWorker) {
      try {
        const w = new SharedWorker('/assets/live-worker.js', { name: 'jetrun-live' });
        this.port = w.port;
        this.port.onmessage = (m) => this.message(m.data);
        w.onerror = () => this.fallback();
        // A worker that never answers: do without it.
        this.hello = setTimeout(() => this.fallback(), 3000);
        return;
      } catch {
        this.noWorker = true;
      }
    }
    this.direct();
  }

  /** stop closes the stream (the page is hidden in the back/forward cache). */
  stop() {
    clearTimeout(this.hello);
    clearTimeout(this.retry);
    this.retry = null;
    if (this.port) {
      this.port.postMessage('close');
      this.port.close();
      this.port = null;
    }
    this.es?.close();
    this.es = null;
    this.open = false;
  }

  fallback() {
    if (this.noWorker) return;
    this.stop();
    this.noWorker = true;
    this.direct();
  }

  message(msg) {
    clearTimeout(this.hello);
    switch (msg.type) {
      case 'open': return this.opened();
      case 'down': return this.down(msg.closed);
      case 'unsupported': return this.fallback();
      case 'run': return this.dispatch('onRun', msg.data, (v) => v);
      case 'removed': return this.dispatch('onRemoved', msg.data, (v) => v.id);
      default: // hello: connecting
    }
  }

  dispatch(method, data, pick) {
    let v;
    try { v = pick(JSON.parse(data)); } catch { return; }
    for (const s of [...this.subs]) s[method]?.(v);
  }

  opened() {
    this.open = true;
    this.setState('live', 'live');
    for (const s of [...this.subs]) s.onOpen?.();
  }

  down(closed) {
    this.open = false;
    this.setState(closed ? 'offline' : 'reconnecting', closed ? 'offline, retrying' : 'reconnecting');
    for (const s of [...this.subs]) s.onDown?.();
  }

  direct() {
    this.retry = null;
    const es = new EventSource('/v1/runs/live');
    this.es = es;
    es.onopen = () => this.opened();
    es.addEventListener('run', (e) => this.dispatch('onRun', e.data, (v) => v));
    es.addEventListener('removed', (e) => this.dispatch('onRemoved', e.data, (v) => v.id));
    es.onerror = () => {
      const closed = es.readyState === EventSource.CLOSED;
      this.down(closed);
      if (closed && this.es === es) {
        // The server refused the stream: EventSource gives up; we do not.
        this.es = null;
        this.retry = setTimeout(() => this.direct(), 3000);
      }
    };
  }

  setState(state, label) {
    if (!this.indicator) return;
    this.indicator.dataset.state = state;
    setText(this.indicator.querySelector('span'), label);
  }
}

const live = new LiveRuns();

// ---------------------------------------------------------------- shared widgets

function statusBadge(status, big) {
  return h('span', { class: `badge st-${status}${big ? ' big' : ''}`, text: status });
}

function updateBadge(el, status) {
  el.className = el.className.replace(/\bst-\w+/, `st-${status}`);
  setText(el, status);
}

/** progressBar returns a bar whose data-fraction the tests read. */
function progressBar(big) {
  return h('div', { class: `bar${big ? ' big' : ''}`, 'data-testid': 'progress', 'data-fraction': '0', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100' },
    h('div', { class: 'fill' }));
}

function updateBar(bar, run) {
  const f = Math.min(1, Math.max(0, run.progress?.fraction || 0));
  const shown = run.status === 'completed' && !run.progress ? 1 : f;
  setAttr(bar, 'data-fraction', String(f));
  setAttr(bar, 'aria-valuenow', String(Math.round(f * 100)));
  bar.style.setProperty('--c', `var(--st-${run.waitingFor && isLive(run) ? 'waiting' : run.status})`);
  bar.classList.toggle('live', run.status === 'running' && !run.waitingFor);
  bar.firstChild.style.width = `${shown * 100}%`;
}

/** progressMeta is the line under a bar: phase · message, or the outcome. */
function progressMeta(run) {
  if (run.status === 'error' || (run.status === 'interrupted' && run.error)) {
    return [h('span', { class: 'err', text: [run.reason, run.error].filter(Boolean).join(': ') })];
  }
  if (run.status === 'completed' && run.summary) return [h('span', { class: 'ok', text: run.summary })];
  if (run.status === 'aborted') return [h('span', { text: run.reason ? `aborted: ${run.reason}` : 'aborted' })];
  const p = run.progress || {};
  const parts = [];
  if (p.phase) parts.push(h('span', { class: 'phase', text: p.phase }));
  if (p.message) parts.push(parts.length ? ' · ' : '', h('span', { text: p.message }));
  if (!parts.length) parts.push(h('span', { class: 'faint', text: run.status === 'starting' ? 'waiting for a worker' : 'no progress reported' }));
  return parts;
}

/** tick refreshes every relative time and running duration once a second. */
function tick() {
  for (const el of document.querySelectorAll('[data-ago]')) setText(el, fmtAgo(Number(el.dataset.ago)));
  for (const el of document.querySelectorAll('[data-since]')) setText(el, fmtDur(Date.now() - Number(el.dataset.since)));
}
setInterval(tick, 1000);

function agoCell(el, ts) {
  const ms = parseTime(ts);
  if (Number.isFinite(ms)) {
    setAttr(el, 'data-ago', String(ms));
    setAttr(el, 'title', fmtAbs(ms));
  }
  setText(el, fmtAgo(ms));
}

function durCell(el, run) {
  const start = parseTime(run.startedAt);
  if (isLive(run) && Number.isFinite(start) && !Number.isFinite(parseTime(run.finishedAt))) {
    setAttr(el, 'data-since', String(start));
  } else {
    setAttr(el, 'data-since', null);
  }
  setText(el, fmtDur(runDuration(run)));
}

// ---------------------------------------------------------------- router

let page = null;

function route() {
  page?.destroy();
  page = null;
  const app = document.getElementById('app');
  put(app);
  window.scrollTo(0, 0);
  const m = /^\/runs\/([^/]+)\/?$/.exec(location.pathname);
  for (const a of document.querySelectorAll('.topbar [data-nav]')) a.toggleAttribute('aria-current', !m);
  page = m ? new RunPage(app, decodeURIComponent(m[1])) : new ListPage(app);
}

function navigate(url) {
  history.pushState(null, '', url);
  route();
}

document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest('a[href]');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/v1/') || url.pathname.startsWith('/assets/')) return;
  e.preventDefault();
  if (url.pathname + url.search !== location.pathname + location.search) navigate(url.pathname + url.search);
});
window.addEventListener('popstate', route);

// A page kept in the back/forward cache must not hold connections: close the
// streams when it is hidden, reopen them (and catch up) when it comes back.
window.addEventListener('pagehide', () => {
  live.stop();
  page?.pause?.();
});
window.addEventListener('pageshow', (e) => {
  if (!e.persisted) return;
  live.start();
  page?.resume?.();
});

// ---------------------------------------------------------------- runs list

const PAGE_SIZE = 100; // rows per page of the list
const MAX_LIMIT = 1000; // the most GET /v1/runs answers at once

/**
 * takeSnapshot returns the list's first page that the server embedded in
 * the page at /, once: it is for the first visit only (its filters are the
 * URL's); later visits of the list fetch it.
 */
function takeSnapshot() {
  const el = document.getElementById('runs-snapshot');
  if (!el) return null;
  el.remove();
  try {
    return JSON.parse(el.textContent);
  } catch {
    return null;
  }
}

/** emptyHelp says how to start a run when there are none. */
function emptyHelp() {
  const body = JSON.stringify({ agentType: 'demo', input: { steps: 5, stepMs: 500 } });
  const cmd = `curl -sf -X POST ${location.origin}/v1/runs -d '${body}'`;
  const pre = h('pre', { class: 'cmd', 'data-testid': 'empty-command', title: 'Click to copy' }, cmd);
  pre.addEventListener('click', () => {
    navigator.clipboard?.writeText(cmd).then(() => toast('Copied', cmd, 'info'), () => {});
  });
  return [
    h('p', { class: 'empty-title', 'data-testid': 'empty-state' }, 'No runs yet.'),
    h('p', {}, 'Start one with “+ New run” above, or from a terminal (agent type ', h('code', {}, 'demo'),
      ' is served by ', h('code', {}, 'make run'), ' and by child-worker by default):'),
    pre,
    h('p', { class: 'faint' }, 'Runs dispatched from anywhere — the HTTP API, ', h('code', {}, 'jetrun dispatch'),
      ', a NATS publish — show up here live.'),
  ];
}

class ListPage {
  constructor(root) {
    this.root = root;
    const q = new URLSearchParams(location.search);
    this.filter = {
      statuses: new Set((q.get('status') || '').split(',').filter((s) => STATUSES.includes(s))),
      agentType: q.get('agentType') || '',
      parent: q.get('parent') || '',
    };
    this.runs = new Map(); // id → summary
    this.rows = new Map(); // id → row element
    this.rendered = new Map(); // id → JSON last rendered
    this.next = '';
    this.total = 0;
    this.loaded = false;
    this.loading = null; // the fetch in flight: updates wait for it
    this.pending = [];
    this.fresh = new Set();
    this.agentTypes = new Set(['demo']);
    this.renderTimer = null;
    this.limit = PAGE_SIZE; // rows a reload asks for: the pages loaded so far
    document.title = 'Runs · jetrun';
    this.build();
    // First paint never waits for the live stream: show the page the server
    // embedded, else fetch it now. Once the stream is open (and after every
    // reconnect) the list is fetched again, so nothing that changed before
    // the stream delivered updates is missed.
    const snap = takeSnapshot();
    if (snap) this.show(snap);
    else if (!live.open) this.load();
    this.unsubscribe = live.subscribe({
      onOpen: () => this.load(),
      onDown: () => { if (!this.loaded && !this.loading) this.load(); },
      onRun: (s) => this.update(s),
      onRemoved: (id) => this.update({ id, removed: true }),
    });
  }

  destroy() {
    this.unsubscribe();
    clearTimeout(this.renderTimer);
  }

  build() {
    const seg = h('div', { class: 'seg', role: 'group', 'aria-label': 'Status filter' });
    this.statusButtons = new Map();
    const all = h('button', { type: 'button', 'data-status': '', onclick: () => { this.filter.statuses.clear(); this.filtersChanged(); } }, 'all');
    seg.append(all);
    this.statusButtons.set('', all);
    for (const s of STATUSES) {
      const b = h('button', {
        type: 'button', class: `st-${s}`, 'data-status': s, title: `Show ${s} runs (click again to remove)`,
        onclick: () => {
          if (this.filter.statuses.has(s)) this.filter.statuses.delete(s);
          else this.filter.statuses.add(s);
          this.filtersChanged();
        },
      }, h('i'), s);
      this.statusButtons.set(s, b);
      seg.append(b);
    }
    const debounce = (fn) => { let t; return () => { clearTimeout(t); t = setTimeout(fn, 300); }; };
    this.agentInput = h('input', { type: 'text', placeholder: 'agent type', list: 'agent-types', value: this.filter.agentType, 'aria-label': 'Agent type filter', spellcheck: 'false' });
    this.parentInput = h('input', { type: 'text', placeholder: 'parent run id', value: this.filter.parent, 'aria-label': 'Parent filter', spellcheck: 'false' });
    const onInput = debounce(() => {
      this.filter.agentType = this.agentInput.value.trim();
      this.filter.parent = this.parentInput.value.trim();
      this.filtersChanged();
    });
    this.agentInput.addEventListener('input', onInput);
    this.parentInput.addEventListener('input', onInput);
    this.datalist = h('datalist', { id: 'agent-types' });
    this.countEl = h('span', { class: 'count' });

    this.tbody = h('tbody');
    this.table = h('table', { class: 'runs', 'data-testid': 'runs-table', 'data-state': 'loading' },
      h('colgroup', {},
        h('col', { class: 'col-status' }), h('col', { class: 'col-run' }), h('col', { class: 'col-agent' }), h('col'),
        h('col', { class: 'col-ms' }), h('col', { class: 'col-att' }), h('col', { class: 'col-time' }), h('col', { class: 'col-dur' })),
      h('thead', {}, h('tr', {},
        h('th', { text: 'Status' }), h('th', { text: 'Run' }), h('th', { class: 'agent', text: 'Agent' }), h('th', { text: 'Progress' }),
        h('th', { text: 'Milestones' }), h('th', { class: 'att', text: 'Att.', title: 'Attempt: 1, +1 per takeover' }),
        h('th', { class: 'time', text: 'Created' }), h('th', { text: 'Duration' }))),
      this.tbody);
    this.empty = h('div', { class: 'empty', hidden: true });
    // One button for the whole life of the list: one rebuilt by every live
    // update would lose clicks that land while it is replaced.
    this.moreBtn = h('button', { class: 'btn small', type: 'button', 'data-testid': 'load-more', hidden: true }, 'Load more');
    this.moreBtn.addEventListener('click', () => this.loadMore());
    this.foot = h('div', { class: 'list-foot', hidden: true }, this.moreBtn);
    this.root.append(h('section', { class: 'panel' },
      h('div', { class: 'toolbar' }, seg, this.agentInput, this.parentInput, this.datalist, this.countEl, this.newRunForm()),
      h('div', { class: 'table-wrap' }, this.table), this.empty, this.foot));
    this.syncFilterUI();
    // A click anywhere on a row opens the run (links keep their own behaviour).
    this.tbody.addEventListener('click', (e) => {
      if (e.target.closest('a, button, input') || getSelection().toString()) return;
      const tr = e.target.closest('tr[data-run-id]');
      if (tr) navigate(`/runs/${encodeURIComponent(tr.dataset.runId)}`);
    });
  }

  newRunForm() {
    const agent = h('input', { type: 'text', value: 'demo', spellcheck: 'false' });
    const id = h('input', { type: 'text', placeholder: 'generated if empty', spellcheck: 'false' });
    const input = h('textarea', { rows: '3', spellcheck: 'false' });
    input.value = '{"steps": 20, "stepMs": 500}';
    const details = h('details', { class: 'new-run' });
    const submit = async (e) => {
      e.preventDefault();
      let parsed;
      try {
        parsed = JSON.parse(input.value);
      } catch (err) {
        toast('Input is not valid JSON', err.message);
        return;
      }
      const body = { agentType: agent.value.trim(), input: parsed };
      if (id.value.trim()) body.runId = id.value.trim();
      try {
        const row = await api('POST', '/v1/runs', body);
        details.open = false;
        navigate(`/runs/${encodeURIComponent(row.id)}`);
      } catch (err) {
        showError('Dispatch failed', err);
      }
    };
    append(details, [
      h('summary', { class: 'btn primary small' }, '+ New run'),
      h('form', { class: 'popover', onsubmit: submit },
        h('label', { class: 'field' }, 'Agent type', agent),
        h('label', { class: 'field' }, 'Run id', id),
        h('label', { class: 'field' }, 'Input (JSON)', input),
        h('div', {}, h('button', { class: 'btn primary', type: 'submit' }, 'Dispatch'))),
    ]);
    return details;
  }

  syncFilterUI() {
    for (const [s, b] of this.statusButtons) {
      b.setAttribute('aria-pressed', String(s === '' ? this.filter.statuses.size === 0 : this.filter.statuses.has(s)));
    }
  }

  query() {
    const q = new URLSearchParams();
    if (this.filter.statuses.size) q.set('status', [...this.filter.statuses].join(','));
    if (this.filter.agentType) q.set('agentType', this.filter.agentType);
    if (this.filter.parent) q.set('parent', this.filter.parent);
    return q;
  }

  filtersChanged() {
    this.limit = PAGE_SIZE;
    this.syncFilterUI();
    const q = this.query().toString();
    history.replaceState(null, '', q ? `/?${q}` : '/');
    this.load();
  }

  matches(s) {
    const f = this.filter;
    return (!f.statuses.size || f.statuses.has(s.status)) &&
      (!f.agentType || s.agentType === f.agentType) &&
      (!f.parent || s.parent === f.parent);
  }

  /**
   * load (re)fetches the list: as many rows as the pages loaded so far.
   * Live updates that arrive meanwhile wait and are applied on top, in order.
   */
  async load() {
    let finished;
    const token = { done: new Promise((resolve) => { finished = resolve; }) };
    this.loading?.finish();
    token.finish = finished;
    this.loading = token;
    this.pending = [];
    if (!this.loaded) this.showState('loading', 'Loading runs…');
    const q = this.query();
    q.set('limit', String(Math.min(this.limit, MAX_LIMIT)));
    try {
      const page = await api('GET', `/v1/runs?${q}`);
      if (this.loading !== token) return; // a newer load superseded this one
      this.loading = null;
      this.show(page);
    } catch (err) {
      if (this.loading !== token) return;
      this.loading = null;
      this.showState('error', `Could not load runs: ${err.message}`);
      showError('Could not load runs', err);
    } finally {
      token.finish();
    }
  }

  /** show replaces the list with a page from the server, then applies the waiting live updates. */
  show(page) {
    this.gen = (this.gen || 0) + 1;
    this.runs.clear();
    for (const s of page.runs || []) this.runs.set(s.id, s);
    this.next = page.next || '';
    this.total = page.total ?? this.runs.size;
    this.loaded = true;
    for (const u of this.pending) this.apply(u, false);
    this.pending = [];
    this.table.dataset.state = 'ready';
    this.render();
  }

  showState(state, text) {
    this.table.dataset.state = state;
    if (this.runs.size && state !== 'error') return;
    this.empty.hidden = false;
    this.empty.key_ = state;
    put(this.empty, text);
  }

  /** loadMore appends the next page. A reload that lands meanwhile replaced the list: it asks again after that one's end. */
  async loadMore() {
    const button = this.moreBtn;
    if (button.disabled) return;
    button.disabled = true;
    try {
      for (let tries = 0; tries < 5 && this.next; tries++) {
        if (this.loading) await this.loading.done;
        const gen = this.gen;
        const q = this.query();
        q.set('limit', String(PAGE_SIZE));
        q.set('cursor', this.next);
        const page = await api('GET', `/v1/runs?${q}`);
        if (gen !== this.gen || this.loading) continue;
        for (const s of page.runs || []) if (!this.runs.has(s.id)) this.runs.set(s.id, s);
        this.next = page.next || '';
        this.limit = this.runs.size + (this.next ? 0 : PAGE_SIZE);
        this.render();
        break;
      }
    } catch (err) {
      showError('Could not load more runs', err);
    }
    button.disabled = false;
  }

  update(u) {
    if (this.loading || !this.loaded) {
      this.pending.push(u);
      return;
    }
    this.apply(u, true);
    this.scheduleRender();
  }

  apply(u, flash) {
    const had = this.runs.has(u.id);
    if (u.removed || !this.matches(u)) {
      if (had) {
        this.runs.delete(u.id);
        this.total = Math.max(0, this.total - 1);
      }
      return;
    }
    if (!had) {
      // A run older than the last loaded one belongs to a page not loaded yet.
      const keys = [...this.runs.values()];
      const oldest = keys.length ? keys.reduce((a, b) => (this.compare(a, b) > 0 ? a : b)) : null;
      if (this.next && oldest && this.compare(u, oldest) > 0) return;
      this.total++;
      if (flash) this.fresh.add(u.id);
    }
    this.runs.set(u.id, u);
  }

  /** compare orders runs newest first, then by id, like the server. */
  compare(a, b) {
    const ka = timeKey(a.createdAt), kb = timeKey(b.createdAt);
    if (ka !== kb) return ka < kb ? 1 : -1;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  }

  scheduleRender() {
    if (this.renderTimer) return;
    this.renderTimer = setTimeout(() => {
      this.renderTimer = null;
      this.render();
    }, 40);
  }

  render() {
    const sorted = [...this.runs.values()].sort((a, b) => this.compare(a, b));
    for (const [id, tr] of this.rows) {
      if (!this.runs.has(id)) {
        tr.remove();
        this.rows.delete(id);
        this.rendered.delete(id);
      }
    }
    let prev = null;
    for (const s of sorted) {
      let tr = this.rows.get(s.id);
      if (!tr) {
        tr = this.makeRow(s);
        this.rows.set(s.id, tr);
      }
      const json = JSON.stringify(s);
      if (this.rendered.get(s.id) !== json) {
        this.fillRow(tr, s);
        this.rendered.set(s.id, json);
      }
      if (this.fresh.delete(s.id)) tr.classList.add('flash');
      const want = prev ? prev.nextSibling : this.tbody.firstChild;
      if (want !== tr) this.tbody.insertBefore(tr, want);
      prev = tr;
      if (s.agentType && !this.agentTypes.has(s.agentType)) this.agentTypes.add(s.agentType);
    }
    this.fresh.clear();
    if (this.datalist.childElementCount !== this.agentTypes.size) {
      put(this.datalist, ...[...this.agentTypes].sort().map((t) => h('option', { value: t })));
    }
    const filtered = this.filter.statuses.size || this.filter.agentType || this.filter.parent;
    this.empty.hidden = sorted.length > 0;
    const emptyKind = sorted.length ? '' : filtered ? 'filtered' : 'none';
    if (emptyKind && this.empty.key_ !== emptyKind) {
      // Built once per kind: a live update must not replace the command under the pointer.
      this.empty.key_ = emptyKind;
      put(this.empty, ...(filtered ? ['No runs match these filters.'] : emptyHelp()));
    }
    const shown = sorted.length;
    this.countEl.textContent = shown === this.total || this.total < shown ? `${shown} run${shown === 1 ? '' : 's'}` : `${shown} of ${this.total} runs`;
    this.foot.hidden = this.moreBtn.hidden = !this.next;
  }

  makeRow(s) {
    const tr = h('tr', { 'data-testid': 'run-row', 'data-run-id': s.id });
    const c = (cls, ...kids) => h('td', { class: cls }, ...kids);
    tr.cells_ = {
      status: c('status'),
      run: c('run'),
      agent: c('agent'),
      prog: c('prog'),
      ms: c('ms'),
      att: c('num att'),
      time: c('time'),
      dur: c('dur'),
    };
    tr.bar = progressBar(false);
    tr.pctEl = h('span', { class: 'pct' });
    tr.metaEl = h('div', { class: 'pmeta' });
    tr.cells_.prog.append(h('div', { class: 'pline' }, tr.bar, tr.pctEl), tr.metaEl);
    tr.append(...Object.values(tr.cells_));
    return tr;
  }

  fillRow(tr, s) {
    const cells = tr.cells_;
    // Rebuild a cell only when what it shows changed: progress ticks often,
    // and a link that is replaced under the pointer loses its click.
    const set = (el, key, build) => {
      if (el.key_ === key) return;
      el.key_ = key;
      put(el, build());
    };
    tr.dataset.status = s.status;
    const waiting = isLive(s) ? s.waitingFor || '' : '';
    const cancelling = !!s.cancelRequested && isLive(s);
    set(cells.status, [s.status, waiting, cancelling].join('|'), () => [
      statusBadge(s.status),
      waiting ? h('div', { class: 'cell-sub' }, h('span', { class: 'chip warn', title: `waiting for signal “${waiting}”` }, `◷ ${waiting}`)) : null,
      cancelling ? h('div', { class: 'cell-sub', text: 'cancelling…' }) : null]);
    set(cells.run, [s.parent, s.worker].join('|'), () => [
      h('div', {}, h('a', { href: `/runs/${encodeURIComponent(s.id)}`, 'data-testid': 'run-link', title: s.id }, s.id)),
      s.parent || s.worker ? h('div', { class: 'cell-sub' },
        s.parent ? ['↳ ', h('a', { href: `/runs/${encodeURIComponent(s.parent)}`, title: `parent run ${s.parent}` }, s.parent)] : null,
        s.parent && s.worker ? ' · ' : null,
        s.worker ? h('span', { title: `worker ${s.worker}` }, s.worker) : null) : null]);
    setText(cells.agent, s.agentType);
    updateBar(tr.bar, s);
    setText(tr.pctEl, s.progress ? pct(s.progress.fraction) : '');
    const p = s.progress || {};
    set(tr.metaEl, [s.status, s.reason, s.error, s.summary, p.phase, p.message].join('|'), () => progressMeta(s));
    tr.metaEl.title = tr.metaEl.textContent;
    set(cells.ms, [s.milestones, s.lastMilestone].join('|'), () => s.milestones
      ? h('span', { class: 'chip', title: `${s.milestones} milestone${s.milestones === 1 ? '' : 's'}; last: ${s.lastMilestone || '?'}` },
        h('span', { class: 'n' }, `◆ ${s.milestones}`), s.lastMilestone || '')
      : h('span', { class: 'faint', text: '—' }));
    set(cells.att, [s.attempt, s.handoffs].join('|'), () => s.attempt > 1
      ? h('span', { class: 'chip takeover', title: `taken over: attempt ${s.attempt}${s.handoffs ? `, ${s.handoffs} handoff(s)` : ''}` }, `⇄ ${s.attempt}`)
      : h('span', { class: s.attempt ? '' : 'faint', text: s.attempt ? String(s.attempt) : '—' }));
    agoCell(cells.time, s.createdAt);
    durCell(cells.dur, s);
  }
}

// ---------------------------------------------------------------- timeline

/**
 * Timeline renders a run's events into entries. It depends only on the
 * sequence of events, so a replay after a reload builds the same entries.
 */
class Timeline {
  constructor(container, onProgress) {
    this.el = container;
    this.onProgress = onProgress;
    this.lastSeq = 0;
    this.t0 = NaN;
    this.last = null; // the newest entry element
    this.block = null; // the open chunk block: {el, pre, seqs, attempt}
    this.phase = null;
    this.interruptedChild = false;
    this.counts = { events: 0, chunks: 0, milestones: 0 };
    this.placeholder = h('div', { class: 'placeholder', text: 'No events yet.' });
    this.el.append(this.placeholder);
  }

  /** add applies one event; it returns false for a duplicate. */
  add(ev) {
    if (!(ev.seq > this.lastSeq)) return false;
    this.lastSeq = ev.seq;
    this.counts.events++;
    const t = parseTime(ev.time);
    if (!Number.isFinite(this.t0)) this.t0 = t;
    const d = ev.data || {};
    const attempt = ev.attempt || d.attempt || 0;
    switch (ev.kind) {
      case 'chunk': this.chunk(ev, d, attempt, t); break;
      case 'status': this.status(ev, d, attempt, t); break;
      case 'milestone': this.milestone(ev, d, t); break;
      case 'progress': this.progress(ev, d, t); break;
      case 'signal': this.signal(ev, d, t); break;
      case 'child-chunk': this.childChunk(ev, d, t); break;
      case 'call': this.call(ev, d, t); break;
      case 'reply': this.reply(ev, d, t); break;
      default:
        this.entry(ev, t, { kind: ev.kind || 'event', icon: '•' },
          h('span', { class: 'k', text: ev.kind }), ' ', h('span', { class: 'jsonv', text: fmtJSON(d) }));
    }
    return true;
  }

  entry(ev, t, { kind, icon, cls }, ...body) {
    this.placeholder.remove();
    const time = h('time', { class: 'tl-time', datetime: ev.time, title: `${fmtAbs(t)}  ·  ${ev.time}  ·  stream seq ${ev.seq}` },
      fmtOffset(t - this.t0));
    const el = h('div', { class: `tl-entry k-${kind}${cls ? ` ${cls}` : ''}`, 'data-testid': 'timeline-entry', 'data-seq': ev.seq, 'data-kind': kind },
      time, h('span', { class: 'tl-icon', 'aria-hidden': 'true', text: icon }), h('div', { class: 'tl-body' }, ...body));
    this.el.append(el);
    this.last = el;
    this.block = null;
    return el;
  }

  chunk(ev, d, attempt, t) {
    this.counts.chunks++;
    let b = this.block;
    if (!b || this.last !== b.el || b.attempt !== attempt) {
      const pre = h('pre', {});
      const el = this.entry(ev, t, { kind: 'chunk', icon: '›' }, pre);
      b = this.block = { el, pre, seqs: [], attempt, first: d.seq, lastChunk: d.seq };
    }
    b.seqs.push(ev.seq);
    b.lastChunk = d.seq ?? b.lastChunk;
    b.el.dataset.seqs = b.seqs.join(' ');
    b.el.title = b.first !== undefined
      ? `chunk${b.seqs.length > 1 ? `s ${b.first}–${b.lastChunk}` : ` ${b.first}`} · attempt ${attempt}` : '';
    if (typeof d.data === 'string') {
      const lastNode = b.pre.lastChild;
      if (lastNode && lastNode.nodeType === Node.TEXT_NODE) lastNode.appendData(d.data);
      else b.pre.append(d.data);
    } else {
      const text = fmtJSON(d.data);
      const needsBreak = b.pre.textContent && !b.pre.textContent.endsWith('\n');
      b.pre.append(h('span', { class: 'json' }, `${needsBreak ? '\n' : ''}${text}\n`));
    }
  }

  status(ev, d, attempt, t) {
    const s = d.status || 'unknown';
    const worker = d.worker ? [' · worker ', h('span', { class: 'mono', text: d.worker })] : null;
    const att = attempt ? ` · attempt ${attempt}` : '';
    let el;
    if (s === 'running' && attempt > 1) {
      el = this.entry(ev, t, { kind: 'status', icon: '⇄', cls: 'segment takeover st-running' },
        h('span', { class: 'k', text: `taken over · attempt ${attempt}` }),
        h('span', { class: 'sub' }, ' · now running on worker ', h('span', { class: 'mono', text: d.worker || '?' })));
    } else if (s === 'running') {
      el = this.entry(ev, t, { kind: 'status', icon: '▶', cls: 'segment st-running' },
        h('span', { class: 'k', text: 'running' }), h('span', { class: 'sub' }, att, worker));
    } else if (s === 'interrupted' && this.interruptedChild && !d.childStillRunning) {
      el = this.entry(ev, t, { kind: 'status', icon: '■', cls: 'final st-interrupted' },
        h('span', { class: 'k', text: 'interrupted · child stopped' }),
        h('span', { class: 'sub' }, d.reason ? ` · ${d.reason}` : '', att));
    } else {
      const icons = { completed: '✓', error: '✕', aborted: '⊘', interrupted: '‖', starting: '○', queued: '⋯' };
      const final = FINAL.has(s) || s === 'interrupted';
      const extra = [];
      if (d.reason) extra.push(` · ${d.reason}`);
      if (s === 'interrupted') {
        if (d.childStillRunning) extra.push(' · child still running');
        if (d.retryable) extra.push(' · retryable');
      }
      el = this.entry(ev, t, { kind: 'status', icon: icons[s] || '●', cls: `${final ? 'final ' : ''}st-${s}` },
        h('span', { class: 'k', text: s }), h('span', { class: 'sub' }, extra, att, worker),
        d.error ? h('div', { class: 'err', text: d.error }) : null);
    }
    el.dataset.status = s;
    if (s === 'interrupted') this.interruptedChild = !!d.childStillRunning;
  }

  milestone(ev, d, t) {
    this.counts.milestones++;
    const data = d.data !== undefined && d.data !== null ? fmtJSON(d.data) : '';
    this.entry(ev, t, { kind: 'milestone', icon: '◆' },
      h('span', { class: 'seqno', text: `#${d.sequence ?? '?'}` }), h('span', { class: 'name', text: d.name || '(unnamed)' }),
      data ? [' ', h('span', { class: 'jsonv', text: data })] : null);
  }

  progress(ev, d, t) {
    this.onProgress?.(d, ev);
    // Only phase changes make an entry: the bar shows the latest value.
    const phase = d.phase || '';
    if (phase === this.phase) return;
    this.phase = phase;
    this.entry(ev, t, { kind: 'progress', icon: '▸' },
      h('span', { class: 'phase', text: phase || 'progress' }),
      ` · ${pct(d.fraction)}`, d.message ? ` · ${d.message}` : '');
  }

  /** childChunk shows a nested run's chunk passed through, in a block per child. */
  childChunk(ev, d, t) {
    let b = this.block;
    if (!b || this.last !== b.el || b.child !== d.childRunId) {
      const pre = h('pre', {});
      const el = this.entry(ev, t, { kind: 'child-chunk', icon: '↳' },
        h('div', { class: 'sub' }, 'from child ',
          h('a', { href: `/runs/${encodeURIComponent(d.childRunId || '')}`, class: 'mono', text: d.childRunId || '?' })), pre);
      el.dataset.child = d.childRunId || '';
      b = this.block = { el, pre, child: d.childRunId };
    }
    if (typeof d.data === 'string') b.pre.append(d.data);
    else b.pre.append(`${b.pre.textContent && !b.pre.textContent.endsWith('\n') ? '\n' : ''}${fmtJSON(d.data)}\n`);
  }

  /** call shows a call to the run's caller; its reply marks it answered. */
  call(ev, d, t) {
    this.calls ??= new Map();
    if (this.calls.has(d.seq)) return; // a copy stored twice
    const state = h('span', { class: 'call-state', text: 'pending' });
    const input = d.input !== undefined && d.input !== null ? fmtJSON(d.input) : '';
    const el = this.entry(ev, t, { kind: 'call', icon: '☎', cls: 'call-pending' },
      h('span', { class: 'k', text: 'call' }), ' ', h('span', { class: 'seqno', text: `#${d.seq ?? '?'}` }), ' ',
      h('code', { text: d.name || '?' }), ' · ', state,
      input ? [' ', h('span', { class: 'jsonv', text: input })] : null);
    el.dataset.state = 'pending';
    el.dataset.callSeq = d.seq;
    this.calls.set(d.seq, { el, state });
  }

  reply(ev, d, t) {
    this.calls ??= new Map();
    const c = this.calls.get(d.seq);
    if (c?.answered) return; // the first reply counts
    const failed = !!d.error;
    if (c) {
      c.answered = true;
      c.el.dataset.state = failed ? 'failed' : 'answered';
      c.el.classList.remove('call-pending');
      c.el.classList.add(failed ? 'call-failed' : 'call-answered');
      setText(c.state, failed ? 'failed' : 'answered');
    }
    const out = d.output !== undefined && d.output !== null ? fmtJSON(d.output) : '';
    this.entry(ev, t, { kind: 'reply', icon: '↩', cls: failed ? 'call-failed' : 'call-answered' },
      h('span', { class: 'k', text: failed ? 'call failed' : 'reply' }), ' ', h('span', { class: 'seqno', text: `#${d.seq ?? '?'}` }), ' ',
      h('code', { text: d.name || '?' }),
      failed ? h('div', { class: 'err', text: d.error }) : (out ? [' ', h('span', { class: 'jsonv', text: out })] : null));
  }

  signal(ev, d, t) {
    const received = d.state === 'received';
    const payload = d.payload !== undefined && d.payload !== null ? fmtJSON(d.payload) : '';
    const el = this.entry(ev, t, { kind: 'signal', icon: received ? '✉' : '◷', cls: received ? 'sig-received' : 'sig-waiting' },
      received
        ? [h('span', { class: 'k', text: 'signal received' }), ' ', h('code', { text: d.name || '?' })]
        : [h('span', { class: 'k', text: 'waiting for signal' }), ' ', h('code', { text: d.name || '?' })],
      payload ? [' ', h('span', { class: 'jsonv', text: payload })] : null);
    el.dataset.state = d.state || '';
  }
}

// ---------------------------------------------------------------- run page

class RunPage {
  constructor(root, id) {
    this.root = root;
    this.id = id;
    this.run = null;
    this.children = new Map();
    this.es = null;
    this.ended = false;
    this.caughtUp = false;
    this.destroyed = false;
    this.liveDirty = false;
    this.progressAt = '';
    this.retry = null;
    this.follow = true;
    document.title = `${id} · jetrun`;
    this.build();
    this.unsubscribe = live.subscribe({
      onOpen: () => { this.fetchRow(); this.fetchChildren(); },
      onDown: () => { if (!this.run) this.fetchRow(); },
      onRun: (s) => this.onSummary(s),
      onRemoved: (id) => {
        if (id === this.id) toast('This run was cleared', 'Its row and events were erased.', 'info');
        if (this.children.delete(id)) this.renderChildren();
      },
    });
    this.fetchRow();
    // A tab hidden for a while gives its connection back.
    this.onVisibility = () => {
      clearTimeout(this.hideTimer);
      if (document.hidden) this.hideTimer = setTimeout(() => this.pause(), 15000);
      else this.resume();
    };
    document.addEventListener('visibilitychange', this.onVisibility);
  }

  destroy() {
    this.destroyed = true;
    this.unsubscribe();
    this.es?.close();
    clearTimeout(this.retry);
    clearTimeout(this.hideTimer);
    document.removeEventListener('visibilitychange', this.onVisibility);
  }

  /** pause closes the events stream of a hidden page; resume catches up. */
  pause() {
    if (this.ended || this.destroyed || (!this.es && !this.retry)) return;
    this.es?.close();
    this.es = null;
    clearTimeout(this.retry);
    this.retry = null;
    this.paused = true;
    this.setTlState('paused', 'paused while hidden');
  }

  resume() {
    if (!this.paused || this.ended || this.destroyed) return;
    this.paused = false;
    this.setTlState('reconnecting', 'catching up');
    this.openEvents(this.timeline.lastSeq);
  }

  build() {
    const idHref = `/runs/${encodeURIComponent(this.id)}`;
    this.crumbs = h('div', { class: 'crumbs' }, h('a', { href: '/', style: 'font-family: var(--sans)' }, '← Runs'));
    this.badge = h('span', { class: 'badge big st-starting', 'data-testid': 'run-status', text: '…' });
    this.waitChip = h('span', { class: 'chip warn', hidden: true });
    this.cancelBtn = h('button', { class: 'btn danger', type: 'button', 'data-testid': 'cancel', hidden: true, onclick: () => this.cancel() }, '⊘ Cancel run');
    this.meta = h('div', { class: 'run-meta' });
    this.bar = progressBar(true);
    this.pctEl = h('span', { class: 'pct' });
    this.pmeta = h('div', { class: 'pmeta' });
    this.outcome = h('div', { class: 'outcome', hidden: true });
    this.waitBox = h('div', { class: 'waiting', 'data-testid': 'waiting', hidden: true });
    const head = h('section', { class: 'panel run-head' },
      h('div', { class: 'run-title' },
        h('h1', {}, h('a', { href: idHref, style: 'color: inherit' }, this.id)),
        this.badge, this.waitChip,
        h('div', { class: 'actions' }, this.cancelBtn)),
      this.meta,
      h('div', { class: 'run-progress' }, this.bar, this.pctEl, this.pmeta),
      this.waitBox, this.outcome);

    this.tlState = h('span', { class: 'tl-state', 'data-state': 'loading' }, h('i'), h('span', { text: 'loading history' }));
    this.tlCounts = h('span', { class: 'counts' });
    const followBox = h('input', { type: 'checkbox', checked: true });
    followBox.addEventListener('change', () => { this.follow = followBox.checked; });
    this.timelineEl = h('div', { class: 'timeline', 'data-testid': 'timeline' });
    this.timeline = new Timeline(this.timelineEl, (p) => this.onProgressEvent(p));
    const tlPanel = h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('span', { class: 'title' }, 'Timeline ', this.tlCounts), this.tlState,
        h('label', { title: 'Scroll to new entries while the run is live' }, followBox, 'follow')),
      this.timelineEl);

    this.facts = h('dl', { class: 'facts' });
    this.jsonPanel = h('section', { class: 'panel', hidden: true });
    this.childList = h('ul', { class: 'children' });
    this.childPanel = h('section', { class: 'panel', hidden: true },
      h('div', { class: 'panel-head' }, h('span', { class: 'title' }, 'Children'),
        h('a', { href: `/?parent=${encodeURIComponent(this.id)}`, style: 'text-transform: none; letter-spacing: 0' }, 'in list')),
      this.childList);
    const side = h('aside', { class: 'side' },
      h('section', { class: 'panel' }, h('div', { class: 'panel-head' }, 'Details'), h('div', { class: 'panel-body' }, this.facts)),
      this.childPanel, this.jsonPanel);

    this.root.append(this.crumbs, head, h('div', { class: 'run-grid' }, tlPanel, side));
  }

  async fetchRow() {
    this.liveDirty = false;
    try {
      const row = await api('GET', `/v1/runs/${encodeURIComponent(this.id)}`);
      if (this.destroyed) return;
      if (this.liveDirty && this.run && !FINAL.has(row.status)) {
        // A live update arrived while fetching: it is newer; keep it.
        const { input, output, finishes, notices, cancelReason } = row;
        Object.assign(this.run, { input, output, finishes, notices, cancelReason });
        this.render();
      } else {
        this.setRow(row, true);
      }
    } catch (err) {
      if (this.destroyed) return;
      if (err.status === 404) {
        this.notFound(err);
        return;
      }
      showError('Could not load the run', err);
    }
  }

  /**
   * setRow shows a new state of the run: a full row, or a summary (which
   * lacks input, output, finishes: those stay from the last full row).
   * Answers can arrive out of order (a cancel's answer after the run ended),
   * and a final status is never left: a live status never replaces it.
   */
  setRow(row, full) {
    const prev = this.run;
    if (prev && FINAL.has(prev.status) && !FINAL.has(row.status)) return false;
    const keep = full || !prev ? row : prev;
    const { input, output, finishes, notices, cancelReason } = keep;
    this.run = { ...row, input, output, finishes, notices, cancelReason };
    this.render();
    if (!this.eventsStarted) {
      // The run exists: replay its events.
      this.eventsStarted = true;
      this.openEvents(0);
    }
    return true;
  }

  notFound(err) {
    this.destroy();
    put(this.root, h('div', { class: 'panel notfound' },
      h('h1', {}, 'No run ', h('code', { text: this.id })),
      h('p', { class: 'muted', text: err.message }),
      h('p', {}, h('a', { href: '/' }, '← All runs'))));
    document.title = `not found · jetrun`;
  }

  async fetchChildren() {
    try {
      const page = await api('GET', `/v1/runs?parent=${encodeURIComponent(this.id)}&limit=1000`);
      if (this.destroyed) return;
      this.children.clear();
      for (const s of page.runs || []) this.children.set(s.id, s);
      this.renderChildren();
    } catch (err) {
      if (!this.destroyed && err.status !== 404) showError('Could not list child runs', err);
    }
  }

  onSummary(s) {
    if (s.id === this.id) {
      this.liveDirty = true;
      if (!this.run) return;
      const prev = this.run;
      // Fetch the full row when it changed in ways a summary does not show.
      // (A summary counts delivered milestone notices in notified; a full row lists them in notices.)
      const notified = (x) => x.notified ?? Object.values(x.notices || {}).filter((n) => n.deliveredAt).length;
      if (this.setRow(s, false) && (s.status !== prev.status || fmtJSON(s.delivered) !== fmtJSON(prev.delivered) ||
        notified(s) !== notified(prev))) this.fetchRow();
    }
    if (s.parent === this.id) {
      this.children.set(s.id, s);
      this.renderChildren();
    }
  }

  /** onProgressEvent updates the bar from the timeline when it is newer than the row. */
  onProgressEvent(p) {
    if (!this.run || !this.caughtUp) return;
    if (this.run.progress?.at && timeKey(p.at) < timeKey(this.run.progress.at)) return;
    this.run.progress = { fraction: p.fraction, phase: p.phase, message: p.message, at: p.at };
    this.renderProgress();
  }

  openEvents(after) {
    if (this.destroyed || this.ended) return;
    this.es?.close();
    clearTimeout(this.retry);
    this.retry = null;
    const url = `/v1/runs/${encodeURIComponent(this.id)}/events${after ? `?after=${after}` : ''}`;
    const es = new EventSource(url);
    this.es = es;
    const onEvent = (e) => {
      let ev;
      try { ev = JSON.parse(e.data); } catch { return; }
      if (ev.seq === undefined && e.lastEventId) ev.seq = Number(e.lastEventId);
      const stick = this.follow && this.caughtUp && nearBottom();
      if (!this.timeline.add(ev)) return;
      if (ev.kind === 'status' && this.caughtUp && this.run && ev.data?.status) {
        // The status event is as fresh as the row: show it at once.
        this.run.status = ev.data.status;
        this.render();
      }
      this.renderCounts();
      if (stick) window.scrollTo(0, document.documentElement.scrollHeight);
    };
    for (const k of ['status', 'chunk', 'progress', 'milestone', 'signal', 'child-chunk', 'call', 'reply']) es.addEventListener(k, onEvent);
    es.onmessage = onEvent; // kinds this page does not know yet
    es.addEventListener('caught-up', () => {
      this.caughtUp = true;
      this.markCaughtUp(this.ended ? 'ended' : 'live');
    });
    es.addEventListener('end', () => {
      this.ended = true;
      es.close();
      this.caughtUp = true;
      this.markCaughtUp('ended');
      this.fetchRow();
    });
    es.onerror = () => {
      if (this.ended || this.destroyed) return;
      if (es.readyState === EventSource.CLOSED) {
        // Refused (not a network blip): reopen after the last event we have.
        this.setTlState('reconnecting', 'stream failed, retrying');
        this.retry = setTimeout(() => {
          this.fetchRow(); // a cleared run answers 404: say so instead of retrying
          this.openEvents(this.timeline.lastSeq);
        }, 3000);
      } else {
        this.setTlState('reconnecting', 'reconnecting');
      }
    };
    es.onopen = () => {
      if (this.caughtUp) this.setTlState('live', 'live');
    };
  }

  setTlState(state, label) {
    this.tlState.dataset.state = state;
    setText(this.tlState.lastChild, label);
  }

  markCaughtUp(state) {
    this.setTlState(state, state === 'ended' ? 'replayed · run ended' : 'live');
    this.tlState.setAttribute('data-testid', 'caught-up');
    this.tlState.title = state === 'ended' ? 'Every stored event is shown; the run has ended.' : 'History loaded; new events appear as they happen.';
    if (this.timeline.counts.events === 0) {
      setText(this.timeline.placeholder, state === 'ended' ? 'This run has no stored events.' : 'No events yet: waiting for a worker to pick the run up.');
    }
  }

  renderCounts() {
    const c = this.timeline.counts;
    setText(this.tlCounts, `· ${c.events} events · ${c.chunks} chunks · ${c.milestones} milestones`);
  }

  async cancel() {
    this.cancelBtn.disabled = true;
    try {
      const row = await api('POST', `/v1/runs/${encodeURIComponent(this.id)}/cancel`, { reason: 'cancelled from the web UI' });
      if (row && row.id === this.id) this.setRow(row, true);
    } catch (err) {
      showError('Cancel failed', err);
      this.cancelBtn.disabled = false;
    }
  }

  async signal(name, payload, buttons) {
    for (const b of buttons) b.disabled = true;
    try {
      const res = await api('POST', `/v1/runs/${encodeURIComponent(this.id)}/signals/${encodeURIComponent(name)}`, payload);
      if (this.sigStatus) {
        this.sigStatus.className = 'sig-status';
        setText(this.sigStatus, `✓ Sent “${name}”${res && res.seq ? ` (signal seq ${res.seq})` : ''} at ${fmtClock(Date.now())}: the run picks it up next.`);
      }
    } catch (err) {
      showError(`Signal “${name}” failed`, err);
      if (this.sigStatus) {
        this.sigStatus.className = 'sig-status err';
        setText(this.sigStatus, `✕ “${name}” was not sent: ${err.message}`);
      }
    }
    for (const b of buttons) b.disabled = false;
  }

  render() {
    const r = this.run;
    if (!r) return;
    document.title = `${r.id} · ${r.status} · jetrun`;
    updateBadge(this.badge, r.status);
    const liveRun = isLive(r);
    const waiting = liveRun && r.waitingFor;
    this.waitChip.hidden = !waiting;
    if (waiting) setText(this.waitChip, `◷ waiting for “${r.waitingFor}”`);
    this.cancelBtn.hidden = !liveRun;
    this.cancelBtn.disabled = !!r.cancelRequested;
    setText(this.cancelBtn, r.cancelRequested ? 'Cancelling…' : '⊘ Cancel run');

    // Crumbs: the parent link.
    const crumbKey = `${r.parent || ''}|${r.parentToolCallId || ''}`;
    if (this.crumbs.key_ !== crumbKey) {
      this.crumbs.key_ = crumbKey;
      put(this.crumbs, h('a', { href: '/', style: 'font-family: var(--sans)' }, '← Runs'),
        r.parent ? ['/', h('span', { class: 'faint', text: 'parent' }),
          h('a', { href: `/runs/${encodeURIComponent(r.parent)}`, 'data-testid': 'parent-link' }, r.parent),
          r.parentToolCallId ? h('span', { class: 'faint', text: `(tool call ${r.parentToolCallId})` }) : null] : null);
    }

    const meta = [['agent', r.agentType]];
    if (r.attempt) meta.push(['attempt', String(r.attempt) + (r.attempt > 1 ? ' (taken over)' : '')]);
    if (r.worker) meta.push(['worker', r.worker]);
    if (r.handoffs) meta.push(['handoffs', String(r.handoffs)]);
    if (r.depth) meta.push(['depth', String(r.depth)]);
    const dur = runDuration(r);
    put(this.meta, ...meta.map(([k, v]) => h('span', {}, `${k} `, h('b', { text: v }))),
      Number.isFinite(dur) ? h('span', {}, 'ran ', h('b', {}, this.durSpan(r))) : null);

    this.renderProgress();
    this.renderWaiting(waiting ? r.waitingFor : '');

    // Outcome: summary or error.
    const text = r.status === 'completed' ? r.summary : r.error || (r.status === 'aborted' || r.status === 'interrupted' ? r.reason : '');
    this.outcome.hidden = !(FINAL.has(r.status) || r.status === 'interrupted') || (!text && !r.reason);
    if (!this.outcome.hidden) {
      this.outcome.className = `outcome st-${r.status}`;
      const label = { completed: 'Summary', error: 'Error', aborted: 'Aborted', interrupted: 'Interrupted' }[r.status];
      const tags = [r.reason && r.status !== 'completed' ? r.reason : '', r.retryable ? 'retryable' : '', r.childStillRunning ? 'child still running' : ''].filter(Boolean);
      put(this.outcome, h('span', { class: 'label', text: label }),
        tags.length ? h('span', { class: 'muted', text: tags.join(' · ') }) : null,
        text && text !== r.reason ? h('pre', { text }) : null);
    }
    this.renderFacts();
    this.renderJSON();
  }

  durSpan(r) {
    const el = h('span');
    durCell(el, r);
    return el;
  }

  renderProgress() {
    const r = this.run;
    updateBar(this.bar, r);
    setText(this.pctEl, r.progress ? pct(r.progress.fraction) : r.status === 'completed' ? '100%' : '—');
    put(this.pmeta, ...(r.progress ? [r.progress.phase ? h('span', { class: 'phase', text: r.progress.phase }) : null,
      r.progress.phase && r.progress.message ? ' · ' : null, r.progress.message || null,
      r.progress.at ? h('span', { class: 'faint', title: fmtAbs(parseTime(r.progress.at)) }, ' · updated ', h('span', { 'data-ago': String(parseTime(r.progress.at)), text: fmtAgo(parseTime(r.progress.at)) })) : null]
      : [h('span', { class: 'faint', text: r.status === 'starting' ? 'waiting for a worker' : 'no progress reported' })]));
  }

  renderWaiting(name) {
    if (!name) {
      this.waitBox.hidden = true;
      put(this.waitBox);
      this.waitingShown = '';
      return;
    }
    this.waitBox.hidden = false;
    if (this.waitingShown === name) return; // keep what the user typed
    this.waitingShown = name;
    const reason = h('input', { type: 'text', class: 'reason', placeholder: 'reason (for reject)', 'aria-label': 'Reject reason' });
    const approve = h('button', { class: 'btn ok', type: 'button', 'data-testid': 'approve' }, '✓ Approve');
    const reject = h('button', { class: 'btn danger', type: 'button', 'data-testid': 'reject' }, '✕ Reject');
    const nameIn = h('input', { type: 'text', value: name, 'aria-label': 'Signal name', spellcheck: 'false' });
    const payload = h('textarea', { rows: '1', 'aria-label': 'Signal payload (JSON)', spellcheck: 'false' });
    payload.value = '{"approved": true}';
    const send = h('button', { class: 'btn', type: 'submit' }, 'Send');
    const all = [approve, reject, send];
    approve.addEventListener('click', () => this.signal(name, { approved: true }, all));
    reject.addEventListener('click', () => this.signal(name, { approved: false, reason: reason.value.trim() || 'rejected from the web UI' }, all));
    const form = h('form', { class: 'signal-form' }, nameIn, payload, send);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const text = payload.value.trim() || '{}';
      try {
        JSON.parse(text);
      } catch (err) {
        toast('Payload is not valid JSON', err.message);
        return;
      }
      if (!nameIn.value.trim()) {
        toast('Signal name is required', '');
        return;
      }
      this.signal(nameIn.value.trim(), text, all);
    });
    put(this.waitBox, 
      h('div', { class: 'row' },
        h('span', { class: 'msg' }, '◷ Waiting for signal ', h('code', { text: name })),
        reason, reject, approve),
      this.sigStatus = h('div', { class: 'sig-status', 'aria-live': 'polite' }),
      h('details', {}, h('summary', {}, 'Send a signal with any name and JSON payload'), form));
  }

  renderFacts() {
    const r = this.run;
    const created = parseTime(r.createdAt), started = parseTime(r.startedAt), finished = parseTime(r.finishedAt);
    const rows = [];
    const time = (ms) => h('span', { title: fmtAbs(ms) }, fmtClock(ms), ' ', h('span', { class: 'faint', 'data-ago': String(ms), text: fmtAgo(ms) }));
    rows.push(['Created', time(created)]);
    if (Number.isFinite(started)) rows.push(['Started', [time(started), h('div', { class: 'faint', text: `queued ${fmtDur(started - created)}` })]]);
    if (Number.isFinite(finished)) rows.push(['Finished', time(finished)]);
    const dur = runDuration(r);
    if (Number.isFinite(dur)) rows.push(['Duration', this.durSpan(r)]);
    if (Number.isFinite(finished) && Number.isFinite(created)) rows.push(['Total', fmtDur(finished - created)]);
    rows.push(['Attempt', `${r.attempt || 0}${r.handoffs ? ` · ${r.handoffs} handoff(s)` : ''}`]);
    if (r.worker) rows.push(['Worker', h('span', { class: 'mono', text: r.worker })]);
    const lease = parseTime(r.leaseUntil);
    if (Number.isFinite(lease) && isLive(r)) rows.push(['Lease until', h('span', { title: fmtAbs(lease) }, fmtClock(lease))]);
    rows.push(['Chunks', String(r.chunks || 0)]);
    rows.push(['Milestones', r.milestones ? `${r.milestones} · last ${r.lastMilestone || '?'}` : '0']);
    const sig = parseTime(r.lastSignalAt);
    if (Number.isFinite(sig)) rows.push(['Last activity', time(sig)]);
    if (r.parent) rows.push(['Parent', h('a', { href: `/runs/${encodeURIComponent(r.parent)}`, class: 'mono' }, r.parent)]);
    if (r.parentToolCallId) rows.push(['Tool call', h('span', { class: 'mono', text: r.parentToolCallId })]);
    if (r.cancelRequested) rows.push(['Cancel', r.cancelReason ? `requested: ${r.cancelReason}` : 'requested']);
    if (r.detached) {
      const d = r.detached;
      rows.push(['Detached', [d.onFinish ? ['onFinish ', h('code', { text: d.onFinish })] : 'yes',
        d.maxBudgetMs ? h('div', { class: 'faint', text: `budget ${fmtDur(d.maxBudgetMs)}` }) : null,
        d.noProgressBudgetMs ? h('div', { class: 'faint', text: `no-progress budget ${fmtDur(d.noProgressBudgetMs)}` }) : null]]);
    }
    // Finishes owed to the onFinish handler, and how their delivery goes.
    const owed = new Set([...Object.keys(r.finishes || {}), ...Object.keys(r.delivered || {})]);
    if (owed.size) {
      rows.push(['Finishes', [...owed].map((st) => {
        const at = parseTime(r.delivered?.[st]);
        const f = (r.finishes || {})[st] || {};
        if (Number.isFinite(at)) return h('div', { title: fmtAbs(at) }, `${st}: delivered ${fmtClock(at)}`);
        if (f.failedAt) return h('div', { class: 'err', title: f.lastError || '' }, `${st}: failed after ${f.attempts || 0} attempt(s), dead-lettered`);
        return h('div', { title: f.lastError || '' }, `${st}: pending`, f.attempts ? ` · ${f.attempts} attempt(s)` : '',
          f.lastError ? h('div', { class: 'faint', text: f.lastError }) : null);
      })]);
    }
    // Milestone notices (detached.onMilestones) and how their delivery goes.
    const listed = r.detached?.onMilestones || [];
    if (listed.length) {
      rows.push(['Milestone notices', listed.map((name) => {
        const n = (r.notices || {})[name];
        if (!n) return h('div', { 'data-testid': 'notice', class: 'faint' }, `${name}: not reached`);
        const at = parseTime(n.deliveredAt);
        if (Number.isFinite(at)) return h('div', { 'data-testid': 'notice', title: fmtAbs(at) }, `${name}: notified ${fmtClock(at)}`);
        if (n.failedAt) return h('div', { 'data-testid': 'notice', class: 'err', title: n.lastError || '' }, `${name}: failed after ${n.attempts || 0} attempt(s), dead-lettered`);
        return h('div', { 'data-testid': 'notice', title: n.lastError || '' }, `${name}: pending`, n.attempts ? ` · ${n.attempts} attempt(s)` : '',
          n.lastError ? h('div', { class: 'faint', text: n.lastError }) : null);
      })]);
    }
    put(this.facts, ...rows.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)]));
  }

  renderJSON() {
    const r = this.run;
    const key = fmtJSON([r.output, r.input]);
    if (this.jsonKey === key) return;
    this.jsonKey = key;
    const open = new Set([...this.jsonPanel.querySelectorAll('details[open]')].map((d) => d.dataset.name));
    const parts = [];
    if (r.output !== undefined) {
      parts.push(h('details', { class: 'json', 'data-name': 'output', open: open.has('output') || (open.size === 0 && r.status === 'completed') },
        h('summary', {}, 'Output'), h('pre', { 'data-testid': 'output', text: fmtJSON(r.output, 2) })));
    }
    if (r.input !== undefined) {
      parts.push(h('details', { class: 'json', 'data-name': 'input', open: open.has('input') },
        h('summary', {}, 'Input'), h('pre', { text: fmtJSON(r.input, 2) })));
    }
    this.jsonPanel.hidden = !parts.length;
    put(this.jsonPanel, ...parts);
  }

  renderChildren() {
    // Grouped by tool call (groups in the order of their first child), then by display order.
    const byTime = [...this.children.values()].sort((a, b) => (timeKey(a.createdAt) < timeKey(b.createdAt) ? -1 : 1));
    const groupRank = new Map();
    for (const c of byTime) if (!groupRank.has(c.parentToolCallId || '')) groupRank.set(c.parentToolCallId || '', groupRank.size);
    const kids = byTime.sort((a, b) =>
      groupRank.get(a.parentToolCallId || '') - groupRank.get(b.parentToolCallId || '') ||
      (a.displayOrder || 0) - (b.displayOrder || 0) || (timeKey(a.createdAt) < timeKey(b.createdAt) ? -1 : 1));
    const grouped = kids.some((c) => c.parentToolCallId);
    this.groupEls ??= new Map();
    this.childPanel.hidden = kids.length === 0;
    this.childEls ??= new Map();
    for (const [id, li] of this.childEls) {
      if (!this.children.has(id)) {
        li.remove();
        this.childEls.delete(id);
      }
    }
    for (const [g, li] of this.groupEls) {
      if (!grouped || !groupRank.has(g)) {
        li.remove();
        this.groupEls.delete(g);
      }
    }
    let prev = null;
    let group = null;
    for (const c of kids) {
      const g = c.parentToolCallId || '';
      if (grouped && g !== group) {
        group = g;
        let gl = this.groupEls.get(g);
        if (!gl) {
          gl = h('li', { class: 'child-group', 'data-testid': 'child-group', 'data-tool-call': g },
            h('span', { class: 'faint', text: g ? `tool call ${g}` : '(no tool call)' }));
          this.groupEls.set(g, gl);
        }
        const wantG = prev ? prev.nextSibling : this.childList.firstChild;
        if (wantG !== gl) this.childList.insertBefore(gl, wantG);
        prev = gl;
      }
      let li = this.childEls.get(c.id);
      if (!li) {
        const bar = progressBar(false);
        bar.removeAttribute('data-testid');
        li = h('li', { 'data-run-id': c.id, 'data-testid': 'child' },
          statusBadge(c.status), h('a', { href: `/runs/${encodeURIComponent(c.id)}`, title: `${c.id} (${c.agentType})` }, c.id), bar);
        li.bar = bar;
        this.childEls.set(c.id, li);
      }
      updateBadge(li.firstChild, c.status);
      updateBar(li.bar, c);
      const want = prev ? prev.nextSibling : this.childList.firstChild;
      if (want !== li) this.childList.insertBefore(li, want);
      prev = li;
    }
  }
}

function nearBottom() {
  const d = document.documentElement;
  return d.scrollHeight - (window.scrollY + window.innerHeight) < 80;
}

// For a look from the console: jetrun.live, jetrun.page.
window.jetrun = { live, get page() { return page; } };

route();
