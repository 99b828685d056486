// live.js: this tab's view of /v1/runs/live (shared with live-worker.js).

import { setText } from './dom.js';

/**
 * LiveRuns is this tab's view of /v1/runs/live. Subscribers get onOpen (the
 * stream is open: fetch what you show now, updates will follow), onRun(summary),
 * onRemoved(id) and onDown (the stream broke).
 *
 * Every tab shares one stream through a shared worker (live-worker.js):
 * browsers allow six HTTP/1.1 connections per host, and each open stream
 * holds one. Without shared workers, the tab opens its own EventSource.
 */
export class LiveRuns {
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

export const live = new LiveRuns();
