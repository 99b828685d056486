// run.js: the run page.

import { h, put, setText } from './dom.js';
import { parseTime, timeKey, fmtAbs, fmtClock, fmtDur, fmtAgo, fmtJSON, fmtCost, pct, runDuration } from './format.js';
import { api, toast, showError } from './api.js';
import { live } from './live.js';
import { statusBadge, updateBadge, progressBar, updateBar, progressMeta, durCell } from './widgets.js';
import { Timeline } from './timeline.js';
import { navigate } from './router.js';
import { Waterfall, fmtUsage, usageTitle } from './waterfall.js';

// MAX_TREE_DEPTH bounds the levels of nested runs a run page fetches and
// shows (JETRUN_MAX_DEPTH's default); TREE_FANOUT the runs of one level
// whose own children it fetches.
const MAX_TREE_DEPTH = 8;
const TREE_FANOUT = 200;

// TRACE_EVERY_MS spaces the trace's refetches while the tree changes, or
// ten times what the last fetch took when more (a big tree costs the server
// a replay per run).
const TRACE_EVERY_MS = 1000;

// KIND_LABELS names the timeline's entry kinds on the buttons that collapse them.
const KIND_LABELS = { status: 'status', chunk: 'chunks', progress: 'progress', milestone: 'milestones', signal: 'signals',
  'child-chunk': 'child chunks', call: 'calls', reply: 'replies', step: 'steps' };

export class RunPage {
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
      onOpen: () => { this.fetchRow(); this.fetchChildren(); this.traceSoon(); },
      onDown: () => { if (!this.run) this.fetchRow(); },
      onRun: (s) => this.onSummary(s),
      onRemoved: (id) => {
        if (id === this.id) toast('This run was cleared', 'Its row and events were erased.', 'info');
        if (this.children.delete(id)) this.renderChildren();
      },
    });
    this.fetchRow();
    this.fetchForks();
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
    clearTimeout(this.traceTimer);
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
    this.openEvents(this.timeline.lastId);
  }

  build() {
    const idHref = `/runs/${encodeURIComponent(this.id)}`;
    this.crumbs = h('div', { class: 'crumbs' }, h('a', { href: '/', style: 'font-family: var(--sans)' }, '← Runs'));
    this.badge = h('span', { class: 'badge big st-starting', 'data-testid': 'run-status', text: '…' });
    this.waitChip = h('span', { class: 'chip warn', hidden: true });
    this.cancelBtn = h('button', { class: 'btn danger', type: 'button', 'data-testid': 'cancel', hidden: true, onclick: () => this.confirmCancel() }, '⊘ Cancel run');
    this.retryBtn = h('button', { class: 'btn primary', type: 'button', 'data-testid': 'retry', hidden: true, onclick: () => this.retryRun(),
      title: 'Dispatch this run id again: it resumes as a new attempt that keeps its milestones and stored steps' }, '↻ Retry');
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
        h('div', { class: 'actions' }, this.retryBtn, this.cancelBtn)),
      this.meta,
      h('div', { class: 'run-progress' }, this.bar, this.pctEl, this.pmeta),
      this.waitBox, this.outcome);

    this.tlState = h('span', { class: 'tl-state', 'data-state': 'loading' }, h('i'), h('span', { text: 'loading history' }));
    this.tlCounts = h('span', { class: 'counts' });
    const followBox = h('input', { type: 'checkbox', checked: true });
    followBox.addEventListener('change', () => { this.follow = followBox.checked; });
    this.timelineEl = h('div', { class: 'timeline', 'data-testid': 'timeline' });
    this.timeline = new Timeline(this.timelineEl, (p) => this.onProgressEvent(p), (step) => this.rerunFrom(step));
    this.forks = new Map(); // the re-runs of this run, by id
    this.kindBar = h('div', { class: 'tl-kinds', 'data-testid': 'timeline-kinds', title: 'Click a kind to collapse its entries, again to show them' });
    this.kindBtns = new Map();
    const tlPanel = h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('span', { class: 'title' }, 'Timeline ', this.tlCounts), this.tlState,
        h('label', { title: 'Scroll to new entries while the run is live' }, followBox, 'follow')),
      this.kindBar,
      this.timelineEl);

    this.facts = h('dl', { class: 'facts' });
    this.jsonPanel = h('section', { class: 'panel', hidden: true });
    this.childList = h('ul', { class: 'children' });
    this.childPanel = h('section', { class: 'panel', hidden: true },
      h('div', { class: 'panel-head' }, h('span', { class: 'title' }, 'Nested runs ',
        this.childCount = h('span', { class: 'counts', 'data-testid': 'child-count' })),
        h('a', { href: `/?parent=${encodeURIComponent(this.id)}`, style: 'text-transform: none; letter-spacing: 0' }, 'in list')),
      this.childList);
    const side = h('aside', { class: 'side' },
      h('section', { class: 'panel' }, h('div', { class: 'panel-head' }, 'Details'), h('div', { class: 'panel-body' }, this.facts)),
      this.childPanel, this.jsonPanel);

    this.waterfall = new Waterfall(() => this.fetchTrace());
    this.root.append(this.crumbs, head, this.waterfall.el, h('div', { class: 'run-grid' }, tlPanel, side));
  }

  async fetchRow() {
    this.liveDirty = false;
    try {
      const row = await api('GET', `/v1/runs/${encodeURIComponent(this.id)}`);
      if (this.destroyed) return;
      if (this.liveDirty && this.run && !row.final) {
        // A live update arrived while fetching: it is newer; keep it.
        const { input, output, finishes, notices, cancelReason, usage, treeUsage, budget, overrun } = row;
        Object.assign(this.run, { input, output, finishes, notices, cancelReason, usage, treeUsage, budget, overrun });
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
    if (prev && prev.final && !row.final) return false;
    const keep = full || !prev ? row : prev;
    const { input, output, finishes, notices, cancelReason, usage, treeUsage, budget, overrun } = keep;
    this.run = { ...row, input, output, finishes, notices, cancelReason, usage, treeUsage, budget, overrun };
    this.render();
    if (!this.eventsStarted) {
      // The run exists: replay its events.
      this.eventsStarted = true;
      this.openEvents(0);
      this.fetchTrace();
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

  /** fetchChildren fetches the run's whole tree of nested runs, level by level. */
  async fetchChildren() {
    try {
      const found = new Map();
      let level = [this.id];
      for (let depth = 0; level.length && depth < MAX_TREE_DEPTH; depth++) {
        const pages = await Promise.all(level.slice(0, TREE_FANOUT).map((p) =>
          api('GET', `/v1/runs?parent=${encodeURIComponent(p)}&limit=1000`)));
        if (this.destroyed) return;
        level = [];
        for (const page of pages) {
          for (const s of page.runs || []) {
            if (s.id === this.id || found.has(s.id)) continue;
            found.set(s.id, s);
            level.push(s.id);
          }
        }
      }
      this.children = found;
      this.renderChildren();
    } catch (err) {
      if (!this.destroyed && err.status !== 404) showError('Could not list child runs', err);
    }
  }

  /** fetchTrace fetches and shows the trace of the run's tree. */
  async fetchTrace() {
    clearTimeout(this.traceTimer);
    this.traceTimer = null;
    const began = Date.now();
    this.traceAt = began;
    const seq = (this.traceSeq = (this.traceSeq || 0) + 1);
    try {
      const trace = await api('GET', `/v1/runs/${encodeURIComponent(this.id)}/trace`);
      this.traceTook = Date.now() - began;
      // An answer overtaken by a later fetch's is older: drop it.
      if (!this.destroyed && seq === this.traceSeq) this.waterfall.render(trace);
    } catch (err) {
      if (!this.destroyed && err.status !== 404) showError('Could not load the trace', err);
    }
  }

  /** traceSoon refetches the trace after a change, at most once per TRACE_EVERY_MS. */
  traceSoon() {
    if (this.traceTimer || this.destroyed || !this.eventsStarted) return;
    const every = Math.max(TRACE_EVERY_MS, 10 * (this.traceTook || 0));
    const wait = Math.max(0, (this.traceAt || 0) + every - Date.now());
    this.traceTimer = setTimeout(() => this.fetchTrace(), wait);
  }

  onSummary(s) {
    if (s.forkedFrom?.runId === this.id && !this.forks.has(s.id)) {
      this.forks.set(s.id, s);
      if (this.run) this.renderFacts();
    }
    if (s.id === this.id || this.children.has(s.id) || this.children.has(s.parent) || s.parent === this.id) this.traceSoon();
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
    if (s.id !== this.id && (s.parent === this.id || this.children.has(s.parent))) {
      // A nested run at any depth of this run's tree.
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
    const url = `/v1/runs/${encodeURIComponent(this.id)}/events${after && after !== '0' ? `?after=${encodeURIComponent(after)}` : ''}`;
    const es = new EventSource(url);
    this.es = es;
    const onEvent = (e) => {
      let ev;
      try { ev = JSON.parse(e.data); } catch { return; }
      if (ev.seq === undefined && e.lastEventId) ev.seq = Number(e.lastEventId);
      const stick = this.follow && this.caughtUp && nearBottom();
      if (!this.timeline.add(ev)) return;
      if (ev.kind === 'step' && this.caughtUp) this.traceSoon();
      if (ev.kind === 'status' && this.caughtUp && this.run && ev.data?.status) {
        // The status event is as fresh as the row: show it at once.
        this.run.status = ev.data.status;
        this.render();
      }
      this.renderCounts();
      if (stick) window.scrollTo(0, document.documentElement.scrollHeight);
    };
    for (const k of ['status', 'chunk', 'progress', 'milestone', 'signal', 'child-chunk', 'call', 'reply', 'step']) es.addEventListener(k, onEvent);
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
      this.traceSoon();
    });
    es.onerror = () => {
      if (this.ended || this.destroyed) return;
      if (es.readyState === EventSource.CLOSED) {
        // Refused (not a network blip): reopen after the last event we have.
        this.setTlState('reconnecting', 'stream failed, retrying');
        this.retry = setTimeout(() => {
          this.fetchRow(); // a cleared run answers 404: say so instead of retrying
          this.openEvents(this.timeline.lastId);
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
    this.renderKinds();
  }

  /** renderKinds keeps one button per kind of event seen, with its count, that collapses its entries. */
  renderKinds() {
    for (const [kind, n] of this.timeline.kinds) {
      let b = this.kindBtns.get(kind);
      if (!b) {
        b = h('button', { class: 'btn small kind', type: 'button', 'data-testid': 'timeline-kind', 'data-kind': kind, 'aria-pressed': 'false' });
        b.addEventListener('click', () => {
          const hide = b.getAttribute('aria-pressed') !== 'true';
          b.setAttribute('aria-pressed', String(hide));
          this.timeline.collapse(kind, hide);
          this.renderKinds();
        });
        this.kindBtns.set(kind, b);
        this.kindBar.append(b);
      }
      const hidden = this.timeline.collapsed.has(kind);
      setText(b, `${hidden ? '▸' : '▾'} ${KIND_LABELS[kind] || kind} ${n}${hidden ? ' (collapsed)' : ''}`);
    }
  }

  /** confirmCancel asks before cancelling: a cancel cannot be undone and reaches the whole tree. */
  confirmCancel() {
    if (this.cancelBtn.disabled || document.querySelector('[data-testid="confirm-cancel"]')) return;
    const live = [...this.children.values()].filter((c) => c.live).length;
    const dialog = h('dialog', { class: 'token-dialog', 'data-testid': 'confirm-cancel' },
      h('form', { method: 'dialog', class: 'token-form' },
        h('h2', {}, 'Cancel run ', h('code', { text: this.id }), '?'),
        h('p', { text: 'It stops and ends aborted; this cannot be undone.' +
          (live ? ` Its ${live} live nested run${live === 1 ? ' is' : 's are'} cancelled too.` : '') }),
        h('div', { class: 'actions' },
          h('button', { class: 'btn', value: 'keep', 'data-testid': 'confirm-keep', autofocus: true }, 'Keep it running'),
          h('button', { class: 'btn danger', value: 'cancel', 'data-testid': 'confirm-yes' }, '⊘ Cancel run'))));
    dialog.addEventListener('close', () => {
      dialog.remove();
      if (dialog.returnValue === 'cancel') this.cancel();
    });
    document.body.append(dialog);
    dialog.showModal();
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

  /** retryRun retries a run given up (interrupted, retryable): its id dispatched again resumes it. */
  async retryRun() {
    const r = this.run;
    if (!r || this.retryBtn.disabled) return;
    this.retryBtn.disabled = true;
    try {
      let input = r.input;
      if (input === undefined) input = (await api('GET', `/v1/runs/${encodeURIComponent(this.id)}`)).input;
      const row = await api('POST', '/v1/runs', { agentType: r.agentType, runId: r.id, input: input ?? {} });
      if (this.destroyed) return;
      toast('Retrying', `${r.id} runs again as a new attempt.`, 'info');
      if (row && row.id === this.id) this.setRow(row, true);
      // Follow the new attempt's events after the ones shown.
      this.ended = false;
      this.setTlState('reconnecting', 'following the retry');
      this.openEvents(this.timeline.lastId);
      this.traceSoon();
    } catch (err) {
      showError('Retry failed', err);
    }
    this.retryBtn.disabled = false;
  }

  /** rerunFrom starts a re-run of this run from step (POST /v1/runs/{id}:rerun) and opens it. */
  async rerunFrom(step) {
    if (this.rerunning) return;
    this.rerunning = true;
    try {
      const row = await api('POST', `/v1/runs/${encodeURIComponent(this.id)}:rerun`, { fromStep: step });
      if (this.destroyed) return;
      toast('Re-run started', `${row.id} runs ${this.id} again from step ${step}.`, 'info');
      navigate(`/runs/${encodeURIComponent(row.id)}`);
    } catch (err) {
      showError(`Re-run from ${step} failed`, err);
    } finally {
      this.rerunning = false;
    }
  }

  /** fetchForks lists the re-runs of this run (GET /v1/runs?forkedFrom=). */
  async fetchForks() {
    try {
      const page = await api('GET', `/v1/runs?forkedFrom=${encodeURIComponent(this.id)}&limit=100`);
      if (this.destroyed) return;
      for (const s of page.runs || []) this.forks.set(s.id, s);
      if (this.run) this.renderFacts();
    } catch (err) {
      if (!this.destroyed && err.status !== 404) showError('Could not list the re-runs', err);
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
    const liveRun = !!r.live;
    const waiting = liveRun && r.waitingFor;
    this.waitChip.hidden = !waiting;
    if (waiting) setText(this.waitChip, `◷ waiting for “${r.waitingFor}”`);
    this.cancelBtn.hidden = !liveRun;
    this.cancelBtn.disabled = !!r.cancelRequested;
    // A run given up with its child stopped is retried by dispatching its
    // id again (POST /v1/runs): it resumes as a new attempt.
    this.retryBtn.hidden = !(r.retryable && r.status === 'interrupted' && !liveRun);
    // A step's "Re-run from here" is offered once the run is not live.
    this.timelineEl.classList.toggle('can-rerun', !liveRun);
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
    this.outcome.hidden = !(r.final || r.status === 'interrupted') || (!text && !r.reason);
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
    if (r.final || (r.status === 'interrupted' && !r.live)) {
      // Ended: its outcome, not the last progress (a run rejected at an
      // approval is no longer waiting for it).
      put(this.pmeta, ...progressMeta(r));
      return;
    }
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
    rows.push(['Chunks', String(r.chunks || 0)]);
    rows.push(['Milestones', r.milestones ? `${r.milestones} · last ${r.lastMilestone || '?'}` : '0']);
    if (fmtUsage(r.usage)) rows.push(['Usage', h('span', { 'data-testid': 'usage', title: usageTitle(r.usage), text: fmtUsage(r.usage) })]);
    if (fmtUsage(r.treeUsage)) rows.push(['Tree usage', h('span', { 'data-testid': 'tree-usage', title: usageTitle(r.treeUsage), text: fmtUsage(r.treeUsage) })]);
    // Costs come in millionths of a currency unit: shown in units.
    const amount = (kind, v) => (/cost/i.test(kind) ? fmtCost(v) || '0' : String(v));
    if (r.budget) rows.push(['Budget', Object.entries(r.budget).map(([k, v]) => `${k === 'costMicros' ? 'cost' : k} ${amount(k, v)}`).join(', ')]);
    if (r.overrun) {
      const o = r.overrun;
      rows.push(['Overrun', h('span', { class: 'err', text: `${/cost/i.test(o.budget) ? 'cost' : o.budget} budget of ${o.owner} exceeded: used ${amount(o.budget, o.used)} of ${amount(o.budget, o.limit)}` })]);
    }
    const sig = parseTime(r.lastSignalAt);
    if (Number.isFinite(sig)) rows.push(['Last activity', time(sig)]);
    if (r.parent) rows.push(['Parent', h('a', { href: `/runs/${encodeURIComponent(r.parent)}`, class: 'mono' }, r.parent)]);
    if (r.parentToolCallId) rows.push(['Tool call', h('span', { class: 'mono', text: r.parentToolCallId })]);
    if (r.forkedFrom) {
      const f = r.forkedFrom;
      rows.push(['Forked from', [h('a', { href: `/runs/${encodeURIComponent(f.runId)}`, class: 'mono', 'data-testid': 'forked-from' }, f.runId),
        f.step ? [' at step ', h('code', { text: f.step })] : ' (retry)',
        f.given?.length ? h('div', { class: 'faint', text: `given ${f.givenCount || f.given.length} stored step(s): ${f.given.join(', ')}${(f.givenCount || 0) > f.given.length ? ', …' : ''}` }) : null]]);
    }
    if (this.forks.size) {
      rows.push(['Re-runs', [...this.forks.values()].map((s) => h('div', {},
        h('a', { href: `/runs/${encodeURIComponent(s.id)}`, class: 'mono', 'data-testid': 'fork-link' }, s.id),
        s.forkedFrom?.step ? h('span', { class: 'faint', text: ` from ${s.forkedFrom.step}` }) : null))]);
    }
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

  /**
   * renderChildren shows the run's tree of nested runs: at each level the
   * children grouped by tool call (groups in the order of their first
   * child), then by display order, each with its own children under it.
   */
  renderChildren() {
    const byParent = new Map();
    for (const c of this.children.values()) {
      const p = c.parent || '';
      if (!byParent.has(p)) byParent.set(p, []);
      byParent.get(p).push(c);
    }
    this.childEls ??= new Map();
    this.groupEls ??= new Map();
    const usedLi = new Set();
    const usedG = new Set();
    const level = (parentId, ul, depth) => {
      const byTime = (byParent.get(parentId) || []).sort((a, b) => (timeKey(a.createdAt) < timeKey(b.createdAt) ? -1 : 1));
      const groupRank = new Map();
      for (const c of byTime) if (!groupRank.has(c.parentToolCallId || '')) groupRank.set(c.parentToolCallId || '', groupRank.size);
      const kids = byTime.sort((a, b) =>
        groupRank.get(a.parentToolCallId || '') - groupRank.get(b.parentToolCallId || '') ||
        (a.displayOrder || 0) - (b.displayOrder || 0) || (timeKey(a.createdAt) < timeKey(b.createdAt) ? -1 : 1));
      const grouped = kids.some((c) => c.parentToolCallId);
      let prev = null;
      let group = null;
      const place = (el) => {
        const want = prev ? prev.nextSibling : ul.firstChild;
        if (want !== el) ul.insertBefore(el, want);
        prev = el;
      };
      for (const c of kids) {
        if (usedLi.has(c.id)) continue;
        usedLi.add(c.id);
        const g = c.parentToolCallId || '';
        if (grouped && g !== group) {
          group = g;
          const key = `${parentId}\u0000${g}`;
          let gl = this.groupEls.get(key);
          if (!gl) {
            gl = h('li', { class: 'child-group', 'data-testid': 'child-group', 'data-tool-call': g, 'data-parent': parentId },
              h('span', { class: 'faint', text: g ? `tool call ${g}` : '(no tool call)' }));
            this.groupEls.set(key, gl);
          }
          usedG.add(key);
          place(gl);
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
        li.dataset.parent = parentId;
        li.dataset.depth = String(depth);
        updateBadge(li.firstChild, c.status);
        updateBar(li.bar, c);
        place(li);
        if (depth < MAX_TREE_DEPTH && byParent.has(c.id)) {
          li.sub ??= h('ul', { class: 'children sub' });
          if (li.sub.parentNode !== li) li.append(li.sub);
          level(c.id, li.sub, depth + 1);
        } else {
          li.sub?.remove();
        }
      }
      for (let rest = prev ? prev.nextSibling : ul.firstChild; rest; rest = prev ? prev.nextSibling : ul.firstChild) rest.remove();
    };
    level(this.id, this.childList, 1);
    for (const [id, li] of this.childEls) {
      if (!usedLi.has(id)) {
        li.remove();
        this.childEls.delete(id);
      }
    }
    for (const [key, gl] of this.groupEls) {
      if (!usedG.has(key)) {
        gl.remove();
        this.groupEls.delete(key);
      }
    }
    this.childPanel.hidden = usedLi.size === 0;
    setText(this.childCount, usedLi.size ? String(usedLi.size) : '');
  }
}

function nearBottom() {
  const d = document.documentElement;
  return d.scrollHeight - (window.scrollY + window.innerHeight) < 80;
}
