// widgets.js: the badges, progress bars and time cells the pages share.

import { h, setText, setAttr } from './dom.js';
import { parseTime, fmtAbs, fmtDur, fmtAgo, runDuration } from './format.js';

export function statusBadge(status, big) {
  return h('span', { class: `badge st-${status}${big ? ' big' : ''}`, text: status });
}

export function updateBadge(el, status) {
  el.className = el.className.replace(/\bst-\w+/, `st-${status}`);
  setText(el, status);
}

/** progressBar returns a bar whose data-fraction the tests read. */
export function progressBar(big) {
  return h('div', { class: `bar${big ? ' big' : ''}`, 'data-testid': 'progress', 'data-fraction': '0', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100' },
    h('div', { class: 'fill' }));
}

export function updateBar(bar, run) {
  const f = Math.min(1, Math.max(0, run.progress?.fraction || 0));
  const shown = run.status === 'completed' && !run.progress ? 1 : f;
  setAttr(bar, 'data-fraction', String(f));
  setAttr(bar, 'aria-valuenow', String(Math.round(f * 100)));
  bar.style.setProperty('--c', `var(--st-${run.waitingFor && run.live ? 'waiting' : run.status})`);
  bar.classList.toggle('live', run.status === 'running' && !run.waitingFor);
  bar.firstChild.style.width = `${shown * 100}%`;
}

/** progressMeta is the line under a bar: phase · message, or the outcome. */
export function progressMeta(run) {
  if (run.status === 'error' || (run.status === 'interrupted' && run.error)) {
    return [h('span', { class: 'err', text: [run.reason, run.error].filter(Boolean).join(': ') })];
  }
  if (run.status === 'interrupted' && !run.live) {
    // Given up: its last progress (say, waiting for an approval) is over.
    return [h('span', { class: 'err', text: run.reason ? `interrupted: ${run.reason}` : 'interrupted' })];
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
export function tick() {
  for (const el of document.querySelectorAll('[data-ago]')) setText(el, fmtAgo(Number(el.dataset.ago)));
  for (const el of document.querySelectorAll('[data-since]')) setText(el, fmtDur(Date.now() - Number(el.dataset.since)));
}
setInterval(tick, 1000);

export function agoCell(el, ts) {
  const ms = parseTime(ts);
  if (Number.isFinite(ms)) {
    setAttr(el, 'data-ago', String(ms));
    setAttr(el, 'title', fmtAbs(ms));
  }
  setText(el, fmtAgo(ms));
}

export function durCell(el, run) {
  const start = parseTime(run.startedAt);
  if (run.live && Number.isFinite(start) && !Number.isFinite(parseTime(run.finishedAt))) {
    setAttr(el, 'data-since', String(start));
  } else {
    setAttr(el, 'data-since', null);
  }
  setText(el, fmtDur(runDuration(run)));
}
