// waterfall.js: the trace of a run's tree (GET /v1/runs/{id}/trace) as a
// waterfall: a row per run and per step, each a bar on one time axis from
// the tree's first creation to its last end, with status, duration and
// usage, and the tree's totals above.

import { h, put, setText } from './dom.js';
import { parseTime, fmtAbs, fmtDur } from './format.js';
import { statusBadge } from './widgets.js';

/** fmtCount formats a count with thousands separators. */
const fmtCount = (n) => Number(n || 0).toLocaleString('en-US');

/** fmtUsage is a run's usage in one line: "120 in + 3 out tokens · 1,200 micros" ('' for none). */
export function fmtUsage(u) {
  if (!u || !(u.inputTokens || u.outputTokens || u.costMicros)) return '';
  return `${fmtCount(u.inputTokens)} in + ${fmtCount(u.outputTokens)} out tokens · ${fmtCount(u.costMicros)} micros`;
}

export class Waterfall {
  /** onRefresh is called by the panel's refresh button. */
  constructor(onRefresh) {
    this.totals = h('span', { class: 'counts', 'data-testid': 'trace-totals' });
    this.rows = h('div', { class: 'wf-rows', 'data-testid': 'waterfall' });
    this.refreshBtn = h('button', { class: 'btn small', type: 'button', 'data-testid': 'trace-refresh', onclick: onRefresh }, '↻ refresh');
    this.el = h('section', { class: 'panel waterfall', hidden: true },
      h('div', { class: 'panel-head' }, h('span', { class: 'title' }, 'Trace ', this.totals), this.refreshBtn),
      this.rows);
  }

  /** render shows a trace answer. */
  render(trace) {
    const runs = trace.runs || [];
    const now = parseTime(trace.now);
    // The axis: from the first creation to the last end (now for live runs).
    let t0 = Infinity, t1 = -Infinity;
    const spans = runs.map((r) => {
      const start = Number.isFinite(parseTime(r.startedAt)) ? parseTime(r.startedAt) : parseTime(r.createdAt);
      const end = Number.isFinite(parseTime(r.finishedAt)) ? parseTime(r.finishedAt) : now;
      t0 = Math.min(t0, parseTime(r.createdAt), start);
      t1 = Math.max(t1, end);
      const steps = (r.steps || []).map((s) => {
        const stored = parseTime(s.at);
        t1 = Math.max(t1, stored);
        return { s, start: stored - (s.durationMs || 0), end: stored };
      });
      return { r, start, end, steps };
    });
    const span = Math.max(1, t1 - t0);
    const bar = (start, end, cls, color) => {
      const left = ((start - t0) / span) * 100;
      const width = Math.max(0.3, ((end - start) / span) * 100);
      return h('div', { class: 'wf-track' },
        h('div', { class: `wf-bar ${cls}`, 'data-testid': 'trace-bar', style: `left: ${left.toFixed(2)}%; width: ${Math.min(width, 100 - left).toFixed(2)}%; --c: ${color}`,
          title: `${fmtAbs(start)} → ${fmtAbs(end)}` }));
    };
    const out = [];
    for (const { r, start, end, steps } of spans) {
      const color = `var(--st-${r.status})`;
      const usage = fmtUsage(r.usage);
      out.push(h('div', { class: 'wf-row run', 'data-testid': 'trace-run', 'data-run-id': r.id, 'data-status': r.status, 'data-level': String(r.level) },
        h('div', { class: 'wf-label', style: `padding-left: ${r.level * 14}px` }, statusBadge(r.status),
          h('a', { href: `/runs/${encodeURIComponent(r.id)}`, title: `${r.id} (${r.agentType})` }, r.id)),
        bar(start, end, 'run', color),
        h('div', { class: 'wf-meta' }, fmtDur(end - start) + (r.final ? '' : ' so far'),
          usage ? h('span', { class: 'faint', 'data-testid': 'trace-usage', text: ` · ${usage}` }) : null,
          r.reason && r.status !== 'completed' ? h('span', { class: 'faint', text: ` · ${r.reason}` }) : null)));
      for (const { s, start: ss, end: se } of steps) {
        out.push(h('div', { class: 'wf-row step', 'data-testid': 'trace-step', 'data-run-id': r.id, 'data-step': s.name },
          h('div', { class: 'wf-label', style: `padding-left: ${r.level * 14 + 18}px` }, h('span', { class: 'mono', text: `↳ ${s.name}` })),
          bar(ss, se, 'step', s.error ? 'var(--st-error)' : color),
          h('div', { class: 'wf-meta' }, s.durationMs ? fmtDur(s.durationMs) : '—',
            h('span', { class: 'faint', text: s.error ? ` · failed: ${s.error}` : ` · ${fmtCount(s.bytes)} B` }),
            s.usage ? h('span', { class: 'faint', 'data-testid': 'trace-step-usage', text: ` · ${fmtUsage(s.usage)}` }) : null)));
      }
    }
    const t = trace.totals || {};
    setText(this.totals, [`· ${t.runs || 0} run${t.runs === 1 ? '' : 's'} · ${t.steps || 0} step${t.steps === 1 ? '' : 's'}`,
      fmtUsage(t) || 'no usage reported', Number.isFinite(span) && runs.length ? `over ${fmtDur(t1 - t0)}` : '',
      trace.truncated ? `cut at ${trace.maxRuns} runs / ${trace.maxSteps} steps a run` : ''].filter(Boolean).join(' · '));
    put(this.rows, ...out);
    // A lone run with no steps and no usage has nothing the page does not show already.
    this.el.hidden = !(runs.length > 1 || t.steps || fmtUsage(t));
  }
}
