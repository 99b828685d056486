// timeline.js: a run's timeline, rebuilt by replaying its events.

import { h, setText } from './dom.js';
import { parseTime, fmtAbs, fmtOffset, fmtJSON, fmtDur, fmtCost, pct } from './format.js';

// ENDS are the statuses drawn as the end of a segment of the timeline. A
// status event carries its status only; whether the run is final is the
// run row's "final" flag, not this.
const ENDS = new Set(['completed', 'error', 'aborted', 'interrupted']);

/**
 * Timeline renders a run's events into entries. It depends only on the
 * sequence of events, so a replay after a reload builds the same entries.
 */
export class Timeline {
  constructor(container, onProgress, onRerun) {
    this.el = container;
    this.onProgress = onProgress;
    this.onRerun = onRerun; // (step name): a step's "Re-run from here"
    this.lastSeq = 0;
    this.lastPart = null; // set while inside a coalesced chunk event: the part shown last
    this.t0 = NaN;
    this.last = null; // the newest entry element
    this.block = null; // the open chunk block: {el, pre, seqs, attempt}
    this.phase = null;
    this.interruptedChild = false;
    this.counts = { events: 0, chunks: 0, milestones: 0 };
    this.kinds = new Map(); // event kind → events of that kind
    this.collapsed = new Set(); // kinds whose entries are hidden
    this.placeholder = h('div', { class: 'placeholder', text: 'No events yet.' });
    this.el.append(this.placeholder);
  }

  /**
   * lastId is the id of the last event applied, to resume after: its stream
   * seq, or "<seq>.<part>" inside a coalesced chunk event (whose chunks share
   * the seq and arrive one by one with part 0 … parts-1).
   */
  get lastId() {
    return this.lastPart === null ? String(this.lastSeq) : `${this.lastSeq}.${this.lastPart}`;
  }

  /** add applies one event; it returns false for a duplicate. */
  add(ev) {
    const part = ev.part || 0;
    if (ev.seq < this.lastSeq || !(ev.seq > this.lastSeq) && !(this.lastPart !== null && part > this.lastPart)) return false;
    this.lastSeq = ev.seq;
    this.lastPart = ev.parts && part < ev.parts - 1 ? part : null;
    this.counts.events++;
    const kind = ev.kind || 'event';
    this.kinds.set(kind, (this.kinds.get(kind) || 0) + 1);
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
      case 'step': this.step(ev, d, t); break;
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
    if (this.collapsed.has(kind)) el.hidden = true;
    this.el.append(el);
    this.last = el;
    this.block = null;
    return el;
  }

  /**
   * collapse hides (or shows again) every entry of one kind, those to come
   * included: a long timeline can be read one kind at a time.
   */
  collapse(kind, hide) {
    if (hide) this.collapsed.add(kind);
    else this.collapsed.delete(kind);
    for (const el of this.el.querySelectorAll(`.tl-entry[data-kind="${CSS.escape(kind)}"]`)) el.hidden = hide;
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
      const final = ENDS.has(s);
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

  /** step shows a durable step: its name, size, duration, usage and attempt (a later attempt reuses it). */
  step(ev, d, t) {
    this.steps ??= new Set();
    if (this.steps.has(d.name)) return; // a copy stored twice: the first counts
    this.steps.add(d.name);
    const failed = !!d.error;
    const bytes = failed ? 0 : new TextEncoder().encode(JSON.stringify(d.output ?? null)).length;
    const meta = [failed ? 'failed' : fmtSize(bytes)];
    if (d.durationMs) meta.push(fmtDur(d.durationMs));
    const u = d.usage;
    if (u && (u.inputTokens || u.outputTokens)) meta.push(`${(u.inputTokens || 0) + (u.outputTokens || 0)} tokens`);
    if (u && fmtCost(u.costMicros)) meta.push(`cost ${fmtCost(u.costMicros)}`);
    if (d.givenFrom) meta.push(`given from ${d.givenFrom}`);
    else if (d.attempt) meta.push(`attempt ${d.attempt}`);
    const out = failed || d.output === undefined || d.output === null ? '' : fmtJSON(d.output);
    const el = this.entry(ev, t, { kind: 'step', icon: '▣', cls: failed ? 'step-failed' : '' },
      h('span', { class: 'k', text: 'step' }), ' ', h('code', { class: 'name', text: d.name || '?' }),
      h('span', { class: 'sub', text: ` · ${meta.join(' · ')}` }),
      failed ? h('div', { class: 'err', text: d.error })
        : out ? [' ', h('span', { class: 'jsonv', 'data-testid': 'step-output', title: out.length > 300 ? out.slice(0, 2000) : undefined,
          text: out.length > 300 ? `${out.slice(0, 300)}…` : out })] : null,
      this.onRerun && d.name ? h('button', { class: 'btn small rerun-step', type: 'button', 'data-testid': 'rerun-step',
        title: 'Start a new run given the steps stored before this one; this step and the ones after it run again',
        onclick: () => this.onRerun(d.name) }, '↻ Re-run from here') : null);
    el.dataset.step = d.name || '';
    el.dataset.bytes = String(bytes);
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

/** fmtSize renders a byte count: 512 B, 1.5 KB, 2.0 MB. */
function fmtSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
