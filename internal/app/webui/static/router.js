// router.js: client-side routing between the list and the run page.

import { put } from './dom.js';
import { live } from './live.js';

let page = null;
let pageFor = null;

/**
 * startRouter shows the page for the current URL and follows navigation.
 * pageFor(root, runID) builds a page: the run page when runID is set, the
 * list otherwise.
 */
export function startRouter(factory) {
  pageFor = factory;
  route();
}

/** currentPage returns the page shown (for a look from the console). */
export function currentPage() {
  return page;
}

function route() {
  page?.destroy();
  page = null;
  const app = document.getElementById('app');
  put(app);
  window.scrollTo(0, 0);
  const m = /^\/runs\/([^/]+)\/?$/.exec(location.pathname);
  const inbox = location.pathname === '/asks';
  const limits = /^\/limits\/?$/.test(location.pathname);
  const here = inbox ? 'asks' : limits ? 'limits' : 'runs';
  for (const a of document.querySelectorAll('.topbar [data-nav]')) {
    a.toggleAttribute('aria-current', a.dataset.nav === here && !m);
  }
  page = pageFor(app, m ? decodeURIComponent(m[1]) : null, inbox);
}

export function navigate(url) {
  history.pushState(null, '', url);
  route();
}

document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest('a[href]');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/v1/') || url.pathname.startsWith('/assets/')) return;
  e.preventDefault();
  if (url.pathname + url.search !== location.pathname + location.search) navigate(url.pathname + url.search);
});
window.addEventListener('popstate', route);

// A page kept in the back/forward cache must not hold connections: close the
// streams when it is hidden, reopen them (and catch up) when it comes back.
window.addEventListener('pagehide', () => {
  live.stop();
  page?.pause?.();
});
window.addEventListener('pageshow', (e) => {
  if (!e.persisted) return;
  live.start();
  page?.resume?.();
});
