// waterfall.js: the trace of a run's tree (GET /v1/runs/{id}/trace) as a
// waterfall: a row per run and per step, each a bar on one time axis from
// the tree's first creation to its last end (ticks above the rows), with
// status, duration, usage and a step's output, and the tree's totals above.

import { h, put, setText } from './dom.js';
import { parseTime, fmtAbs, fmtDur, fmtCost, fmtOffset } from './format.js';
import { statusBadge } from './widgets.js';

/** fmtCount formats a count with thousands separators. */
const fmtCount = (n) => Number(n || 0).toLocaleString('en-US');

/**
 * fmtUsage is a run's usage in one line: "120 in + 3 out tokens · cost 0.0012",
 * each part only when known ('' for no usage at all). Costs are reported in
 * millionths of a currency unit and shown in units.
 */
export function fmtUsage(u) {
  if (!u) return '';
  const parts = [];
  if (u.inputTokens || u.outputTokens) parts.push(`${fmtCount(u.inputTokens)} in + ${fmtCount(u.outputTokens)} out tokens`);
  const cost = fmtCost(u.costMicros);
  if (cost) parts.push(`cost ${cost}`);
  return parts.join(' · ');
}

/** usageTitle is the exact figures behind fmtUsage, for a tooltip. */
export function usageTitle(u) {
  if (!u || !u.costMicros) return undefined;
  return `${fmtCount(u.costMicros)} micros (millionths of a currency unit)`;
}

// AXIS_STEPS are the tick spacings the axis picks from, in ms.
const AXIS_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000,
  120000, 300000, 600000, 900000, 1800000, 3600000, 7200000, 21600000, 43200000, 86400000];

/** ticks returns the offsets (ms from the axis' start) of at most about 6 ticks over span ms. */
export function ticks(span) {
  const every = AXIS_STEPS.find((s) => span / s <= 6) || Math.ceil(span / 6);
  const out = [];
  for (let t = 0; t <= span; t += every) out.push(t);
  return out;
}

/** fmtTick labels a tick: 0, 250ms, 1.5s, 2m, 1.5h. */
function fmtTick(t) {
  if (t === 0) return '0';
  if (t < 1000) return `${t}ms`;
  if (t < 60000) return `${+(t / 1000).toFixed(2)}s`;
  if (t < 3600000) return `${+(t / 60000).toFixed(1)}m`;
  return `${+(t / 3600000).toFixed(1)}h`;
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
      const ended = Number.isFinite(parseTime(r.finishedAt));
      const end = ended ? parseTime(r.finishedAt) : now;
      t0 = Math.min(t0, parseTime(r.createdAt), start);
      t1 = Math.max(t1, end);
      const steps = (r.steps || []).map((s) => {
        const stored = parseTime(s.at);
        t1 = Math.max(t1, stored);
        return { s, start: stored - (s.durationMs || 0), end: stored };
      });
      return { r, start, end, ended, steps };
    });
    const span = Math.max(1, t1 - t0);
    const bar = (start, end, cls, color) => {
      const left = ((start - t0) / span) * 100;
      const width = Math.max(0.3, ((end - start) / span) * 100);
      return h('div', { class: 'wf-track' },
        h('div', { class: `wf-bar ${cls}`, 'data-testid': 'trace-bar', style: `left: ${left.toFixed(2)}%; width: ${Math.min(width, 100 - left).toFixed(2)}%; --c: ${color}`,
          title: `${fmtAbs(start)} → ${fmtAbs(end)}` }));
    };
    const out = runs.length ? [this.axis(span)] : [];
    for (const { r, start, end, ended, steps } of spans) {
      const color = `var(--st-${r.status})`;
      const usage = fmtUsage(r.usage);
      // "so far" only while the run has not ended: a run given up
      // (interrupted) ended too, though it may be resumed later.
      out.push(h('div', { class: 'wf-row run', 'data-testid': 'trace-run', 'data-run-id': r.id, 'data-status': r.status, 'data-level': String(r.level) },
        h('div', { class: 'wf-label', style: `padding-left: ${r.level * 14}px` }, statusBadge(r.status),
          h('a', { href: `/runs/${encodeURIComponent(r.id)}`, title: `${r.id} (${r.agentType})` }, r.id)),
        bar(start, end, 'run', color),
        h('div', { class: 'wf-meta' }, h('span', { 'data-testid': 'trace-run-duration', text: fmtDur(end - start) + (ended ? '' : ' so far') }),
          usage ? h('span', { class: 'faint', 'data-testid': 'trace-usage', title: usageTitle(r.usage), text: ` · ${usage}` }) : null,
          r.reason && r.status !== 'completed' ? h('span', { class: 'faint', text: ` · ${r.reason}` }) : null)));
      for (const { s, start: ss, end: se } of steps) {
        // A step without a duration took under a millisecond, or its child
        // did not say: show when it was stored instead.
        const when = s.durationMs ? fmtDur(s.durationMs) : `stored ${fmtOffset(se - t0)}`;
        const stepUsage = fmtUsage(s.usage);
        out.push(h('div', { class: 'wf-row step', 'data-testid': 'trace-step', 'data-run-id': r.id, 'data-step': s.name },
          h('div', { class: 'wf-label', style: `padding-left: ${r.level * 14 + 18}px`, title: s.error || s.preview || '' },
            h('span', { class: 'mono', text: `↳ ${s.name}` }),
            s.error ? h('span', { class: 'err', text: `failed: ${s.error}` })
              : h('span', { class: 'wf-out', 'data-testid': 'trace-step-output', text: s.preview ? `→ ${s.preview}` : `${fmtCount(s.bytes)} B` })),
          bar(ss, se, 'step', s.error ? 'var(--st-error)' : color),
          h('div', { class: 'wf-meta' },
            h('span', { 'data-testid': 'trace-step-duration', text: when }),
            stepUsage ? h('span', { class: 'faint', 'data-testid': 'trace-step-usage', title: usageTitle(s.usage), text: ` · ${stepUsage}` }) : null)));
      }
    }
    const t = trace.totals || {};
    setText(this.totals, [`· ${t.runs || 0} run${t.runs === 1 ? '' : 's'} · ${t.steps || 0} step${t.steps === 1 ? '' : 's'}`,
      fmtUsage(t) || 'no usage reported', Number.isFinite(span) && runs.length ? `over ${fmtDur(t1 - t0)}` : '',
      trace.truncated ? `cut at ${trace.maxRuns} runs / ${trace.maxSteps} steps a run` : ''].filter(Boolean).join(' · '));
    this.totals.title = usageTitle(t) || '';
    put(this.rows, ...out);
    // A lone run with no steps and no usage has nothing the page does not show already.
    this.el.hidden = !(runs.length > 1 || t.steps || fmtUsage(t));
  }

  /** axis is the row of time ticks over the bars: offsets from the tree's start. */
  axis(span) {
    return h('div', { class: 'wf-row axis', 'data-testid': 'trace-axis' },
      h('div', { class: 'wf-label faint', text: 'time from start' }),
      h('div', { class: 'wf-track axis' }, ...ticks(span).map((t) =>
        h('span', { class: 'wf-tick', 'data-testid': 'trace-tick', 'data-ms': String(t), style: `left: ${((t / span) * 100).toFixed(2)}%`,
          text: fmtTick(t) }))),
      h('div', { class: 'wf-meta' }));
  }
}
