// limits.js: the provider limits page (/limits): each limit's rates, what
// the fleet used of them this window and the last, reservations waiting and
// in use, a pause in force, and the tenants' shares. It reads GET /v1/limits
// every two seconds while it is shown.

import { h, put } from './dom.js';
import { api } from './api.js';

const EVERY_MS = 2000;

export class LimitsPage {
  constructor(root) {
    this.root = root;
    this.timer = null;
    document.title = 'Limits · jetrun';
    this.body = h('tbody');
    this.state = h('p', { class: 'count', 'data-testid': 'limits-state' }, 'loading…');
    put(root,
      h('section', { class: 'panel' },
        h('div', { class: 'toolbar' }, h('h1', {}, 'Provider limits'), this.state),
        h('div', { class: 'table-wrap' },
          h('table', { class: 'runs limits', 'data-testid': 'limits-table' },
            h('thead', {}, h('tr', {},
              ['Limit', 'Window', 'Requests', 'Tokens', 'Concurrent', 'Waiting', 'Workers', 'Paused', 'Tenants']
                .map((t) => h('th', {}, t)))),
            this.body))));
    this.load();
  }

  async load() {
    clearTimeout(this.timer);
    try {
      const data = await api('GET', '/v1/limits');
      this.show(data.limits || []);
    } catch (err) {
      this.state.textContent = err.message;
    }
    this.timer = setTimeout(() => this.load(), EVERY_MS);
  }

  show(limits) {
    this.state.textContent = limits.length === 1 ? '1 limit' : `${limits.length} limits`;
    if (limits.length === 0) {
      put(this.body, h('tr', {}, h('td', { colspan: 9, class: 'empty' },
        'No limits. Set them with JETRUN_LIMITS, jetrun limits set, or PUT /v1/limits/{name}.')));
      return;
    }
    put(this.body, limits.map((l) => {
      const s = l.spec;
      const last = l.pool.last || l.current;
      return h('tr', { 'data-limit': s.name },
        h('td', {}, s.name),
        h('td', {}, `${(l.windowMs / 1000).toLocaleString()} s`),
        h('td', {}, used(l.current.requests, s.requests)),
        h('td', {}, used(l.current.tokens, s.tokens)),
        h('td', {}, used(l.inUse, s.concurrent)),
        h('td', { 'data-testid': 'waiting' }, String(l.waiting)),
        h('td', {}, String(l.holders)),
        h('td', { 'data-testid': 'paused' }, l.paused
          ? `until ${new Date(l.pause.untilMs).toLocaleTimeString()}${l.pause.reason ? ` (${l.pause.reason})` : ''}`
          : '—'),
        h('td', { 'data-testid': 'tenants' }, shares(last.tenants)));
    }));
  }

  destroy() {
    clearTimeout(this.timer);
  }

  pause() {
    clearTimeout(this.timer);
  }

  resume() {
    this.load();
  }
}

function used(n, limit) {
  return limit ? `${n.toLocaleString()} / ${limit.toLocaleString()}` : `${n.toLocaleString()} / —`;
}

function shares(tenants) {
  const entries = Object.entries(tenants || {});
  const total = entries.reduce((a, [, n]) => a + n, 0);
  if (!total) return '—';
  return entries.sort(([a], [b]) => a.localeCompare(b))
    .map(([t, n]) => `${t} ${Math.round((100 * n) / total)}%`).join(', ');
}
