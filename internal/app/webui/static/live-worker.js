// A shared worker that holds one /v1/runs/live stream for every jetrun tab of
// the browser. Browsers allow six HTTP/1.1 connections per host and each
// EventSource keeps one open: without sharing, a few tabs would use them all
// and the next request would hang. Tabs talk to it through app.js (LiveRuns);
// a tab sends "close" when it goes away.
'use strict';

const ports = new Set();
let es = null;
let open = false;
let retry = null;

function broadcast(msg) {
  for (const p of ports) p.postMessage(msg);
}

function stop() {
  if (es) es.close();
  es = null;
  open = false;
  clearTimeout(retry);
  retry = null;
}

function connect() {
  retry = null;
  if (!ports.size) return;
  const s = new EventSource('/v1/runs/live');
  es = s;
  s.onopen = () => {
    open = true;
    broadcast({ type: 'open' });
  };
  s.addEventListener('run', (e) => broadcast({ type: 'run', data: e.data }));
  s.addEventListener('removed', (e) => broadcast({ type: 'removed', data: e.data }));
  s.onerror = () => {
    open = false;
    const closed = s.readyState === EventSource.CLOSED;
    broadcast({ type: 'down', closed });
    if (closed && es === s) {
      // The server refused the stream: EventSource gives up; we do not.
      es = null;
      retry = setTimeout(connect, 3000);
    }
  };
}

self.onconnect = (e) => {
  const port = e.ports[0];
  port.onmessage = (m) => {
    if (m.data === 'close') {
      ports.delete(port);
      if (!ports.size) stop();
    }
  };
  if (typeof EventSource === 'undefined') {
    port.postMessage({ type: 'unsupported' });
    return;
  }
  ports.add(port);
  port.postMessage({ type: open ? 'open' : 'hello' });
  if (!es && !retry) connect();
};
