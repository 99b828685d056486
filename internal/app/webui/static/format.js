// format.js: times, durations and numbers as the UI shows them.
//
// Whether a run is live (may still change, can be cancelled) or final is the
// server's rule: every run and summary it sends carries "live" and "final".

/** STATUSES are the run statuses, in the order the list's filter shows them. */
export const STATUSES = ['queued', 'starting', 'running', 'completed', 'error', 'aborted', 'interrupted'];

/** parseTime turns an RFC 3339 timestamp into milliseconds (NaN if absent). */
export function parseTime(s) {
  if (!s || s.startsWith('0001-')) return NaN;
  return Date.parse(s);
}

/** timeKey orders RFC 3339 timestamps to the nanosecond, as the server does. */
export function timeKey(s) {
  const m = /^(.*?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(s || '');
  if (!m) return '';
  const secs = Math.floor(Date.parse(m[1] + m[3]) / 1000);
  return String(secs).padStart(12, '0') + (m[2] || '').padEnd(9, '0').slice(0, 9);
}

export const pad = (n, w = 2) => String(n).padStart(w, '0');

export function fmtAbs(ms) {
  if (!Number.isFinite(ms)) return '';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function fmtClock(ms) {
  if (!Number.isFinite(ms)) return '—';
  const d = new Date(ms);
  const today = new Date();
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

/** fmtDur formats a duration compactly: 850ms, 4.2s, 3m 04s, 2h 05m, 3d 4h. */
export function fmtDur(ms) {
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

export function fmtAgo(ms) {
  if (!Number.isFinite(ms)) return '—';
  const d = Date.now() - ms;
  if (d < 5000) return 'just now';
  return `${fmtDur(d).replace(/\.\d/, '')} ago`;
}

/** fmtOffset formats a timeline offset: +1.234s, +2m03.456s, +1h02m03s. */
export function fmtOffset(ms) {
  ms = Math.max(0, ms);
  const s = ms / 1000;
  if (s < 60) return `+${s.toFixed(3)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `+${m}m${(s % 60).toFixed(3).padStart(6, '0')}s`;
  return `+${Math.floor(m / 60)}h${pad(m % 60)}m${pad(Math.floor(s % 60))}s`;
}

export function fmtJSON(v, indent) {
  try {
    return JSON.stringify(v, null, indent);
  } catch {
    return String(v);
  }
}

/**
 * fmtCost formats a cost given in millionths of a currency unit (costMicros)
 * as currency units: 810 → "0.00081", 1,234,000 → "1.23"; '' for none.
 */
export function fmtCost(micros) {
  const v = Number(micros || 0) / 1e6;
  if (!(v > 0)) return '';
  if (v >= 1) return v.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  return v.toLocaleString('en-US', { maximumSignificantDigits: 2 });
}

export function pct(f) {
  return `${Math.round(Math.min(1, Math.max(0, f || 0)) * 100)}%`;
}

/** runDuration is how long the run ran (or has been running). */
export function runDuration(run) {
  const start = parseTime(run.startedAt);
  if (!Number.isFinite(start)) return NaN;
  const end = parseTime(run.finishedAt);
  if (Number.isFinite(end)) return end - start;
  return run.live ? Date.now() - start : NaN;
}
