// list.js: the runs list page.

import { h, append, put, setText } from './dom.js';
import { STATUSES, timeKey, pct } from './format.js';
import { api, toast, showError } from './api.js';
import { live } from './live.js';
import { statusBadge, progressBar, updateBar, progressMeta, agoCell, durCell } from './widgets.js';
import { navigate } from './router.js';

export const PAGE_SIZE = 100; // rows per page of the list
export const MAX_LIMIT = 1000; // the most GET /v1/runs answers at once

/**
 * takeSnapshot returns the list's first page that the server embedded in
 * the page at /, once: it is for the first visit only (its filters are the
 * URL's); later visits of the list fetch it.
 */
export function takeSnapshot() {
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
export function emptyHelp() {
  const body = JSON.stringify({ agentType: 'demo', input: { steps: 5, stepMs: 500 } });
  const cmd = `curl -sf -X POST ${location.origin}/v1/runs -H 'Content-Type: application/json' -d '${body}'`;
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

export class ListPage {
  constructor(root) {
    this.root = root;
    const q = new URLSearchParams(location.search);
    this.filter = {
      statuses: new Set((q.get('status') || '').split(',').filter((s) => STATUSES.includes(s))),
      agentType: q.get('agentType') || '',
      parent: q.get('parent') || '',
      q: q.get('q') || '', // a part of the run id
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
    this.searchInput = h('input', { type: 'search', placeholder: 'search run id', value: this.filter.q, 'aria-label': 'Search by run id',
      spellcheck: 'false', 'data-testid': 'search', title: 'Runs whose id contains this (any case); Enter opens the run of exactly this id' });
    this.agentInput = h('input', { type: 'text', placeholder: 'agent type', list: 'agent-types', value: this.filter.agentType, 'aria-label': 'Agent type filter', spellcheck: 'false' });
    this.parentInput = h('input', { type: 'text', placeholder: 'parent run id', value: this.filter.parent, 'aria-label': 'Parent filter', spellcheck: 'false' });
    const onInput = debounce(() => {
      this.filter.agentType = this.agentInput.value.trim();
      this.filter.parent = this.parentInput.value.trim();
      this.filter.q = this.searchInput.value.trim();
      this.filtersChanged();
    });
    this.agentInput.addEventListener('input', onInput);
    this.parentInput.addEventListener('input', onInput);
    this.searchInput.addEventListener('input', onInput);
    // Enter on a whole run id opens that run; on a part of one, the list
    // shows the matches.
    this.searchInput.addEventListener('keydown', async (e) => {
      const id = this.searchInput.value.trim();
      if (e.key !== 'Enter' || !id) return;
      if (!this.runs.has(id)) {
        try {
          await api('GET', `/v1/runs/${encodeURIComponent(id)}`);
        } catch {
          return; // no run of that id
        }
      }
      if (this.searchInput.value.trim() === id) navigate(`/runs/${encodeURIComponent(id)}`);
    });
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
      h('div', { class: 'toolbar' }, seg, this.searchInput, this.agentInput, this.parentInput, this.datalist, this.countEl, this.newRunForm()),
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
    if (this.filter.q) q.set('q', this.filter.q);
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
      (!f.parent || s.parent === f.parent) &&
      (!f.q || s.id.toLowerCase().includes(f.q.toLowerCase()));
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
    const filtered = this.filter.statuses.size || this.filter.agentType || this.filter.parent || this.filter.q;
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
    // Say how many runs the next pages hold (the total counts them all).
    const remaining = this.total - shown;
    setText(this.moreBtn, remaining > 0 ? `Load more (${remaining} remaining)` : 'Load more');
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
    const waiting = s.live ? s.waitingFor || '' : '';
    const cancelling = !!s.cancelRequested && s.live;
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
