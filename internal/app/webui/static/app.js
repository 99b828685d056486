// jetrun web UI: a runs list with live updates and a run page whose timeline
// is rebuilt by replaying the run's events. Plain ES modules, no build step:
// this entry module imports the others from /assets/.
//
// Modules: dom.js (elements), format.js (times, numbers), api.js (the JSON
// API, token prompt, toasts), live.js (the live runs stream), widgets.js
// (badges, bars, time cells), router.js, list.js (the runs list),
// timeline.js and run.js (the run page).
//
// Data flow:
//   GET /v1/runs/live (SSE)         every row change → list rows, run header, children
//   <script id="runs-snapshot">     the list's first page, embedded in the page at / (first paint)
//   GET /v1/runs?…                  the list, refetched whenever the live stream (re)opens
//   GET /v1/runs/{id}               the full row (input, output)
//   GET /v1/runs/{id}/events (SSE)  the timeline: history, then live; "end" closes it
//   GET /v1/asks, /v1/asks/live     the inbox and the header's count of open asks (asks.js)
//
// Runs and summaries carry "live" and "final" flags: the server's rules,
// which the UI uses instead of deriving them from the status.

import { live } from './live.js';
import { startRouter, currentPage } from './router.js';
import { ListPage } from './list.js';
import { RunPage } from './run.js';
import { AsksPage, startAskCount } from './asks.js';
import { LimitsPage } from './limits.js';

// For a look from the console: jetrun.live, jetrun.page.
window.jetrun = { live, get page() { return currentPage(); } };

startRouter((root, runID, inbox) => {
  if (runID) return new RunPage(root, runID);
  if (inbox) return new AsksPage(root);
  return /^\/limits\/?$/.test(location.pathname) ? new LimitsPage(root) : new ListPage(root);
});
startAskCount();
