// api.js: the JSON API client, the token prompt and the toasts.

import { h } from './dom.js';

export class ApiError extends Error {
  constructor(message, code, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

// api calls the JSON API. A write always says Content-Type: application/json,
// body or not: the server refuses other writes (they could come from a form
// of another site).
export async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' } };
  if (method !== 'GET' && method !== 'HEAD') init.headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    throw new ApiError(`cannot reach the server: ${err.message}`, 'network', 0);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text for the error
  }
  if (!res.ok) {
    const msg = (data && data.error) || text.trim() || res.statusText;
    if (res.status === 401) askToken();
    throw new ApiError(msg, (data && data.code) || `http_${res.status}`, res.status);
  }
  return data;
}

// askToken asks once for an API token when the server wants one
// (JETRUN_HTTP_TOKENS). POST /v1/session keeps it in an HttpOnly,
// SameSite=Strict cookie for this browser session; the page then reloads
// with it, the live stream included.
let askingToken = false;
export function askToken() {
  if (askingToken) return;
  askingToken = true;
  const input = h('input', { type: 'password', name: 'token', autocomplete: 'current-password', required: true,
    'aria-label': 'API token', 'data-testid': 'token-input' });
  const problem = h('p', { class: 'token-problem', role: 'alert' });
  const form = h('form', { class: 'token-form' },
    h('h2', { text: 'This jetrun needs an API token' }),
    h('p', { text: 'Enter a read or write token from JETRUN_HTTP_TOKENS. It is kept for this browser session only.' }),
    input, problem,
    h('button', { type: 'submit', text: 'Continue', 'data-testid': 'token-submit' }));
  const dialog = h('dialog', { class: 'token-dialog', 'data-testid': 'token-dialog' }, form);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let res;
    try {
      res = await fetch('/v1/session', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: input.value }) });
    } catch (err) {
      problem.textContent = `cannot reach the server: ${err.message}`;
      return;
    }
    if (res.ok) {
      location.reload();
      return;
    }
    problem.textContent = res.status === 401 ? 'That token is not valid.' : `The server answered ${res.status}.`;
    input.select();
  });
  document.body.append(dialog);
  dialog.showModal();
  input.focus();
}

/**
 * toast shows a message in the corner. One that says what a toast on screen
 * says already is not shown twice: that toast stays up longer instead.
 */
export function toast(title, detail, kind = 'error') {
  const box = document.getElementById('toasts');
  const key = `${kind}\u0000${title}\u0000${detail || ''}`;
  const ttl = kind === 'error' ? 12000 : 5000;
  const same = [...box.children].find((t) => t.key_ === key);
  if (same) {
    clearTimeout(same.timer_);
    same.timer_ = setTimeout(() => same.remove(), ttl);
    return;
  }
  const el = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status', title: 'Dismiss', 'data-testid': 'toast' },
    h('b', { text: title }), detail ? h('span', { text: detail }) : null);
  el.key_ = key;
  el.addEventListener('click', () => el.remove());
  box.append(el);
  el.timer_ = setTimeout(() => el.remove(), ttl);
}

/**
 * showError toasts a failed call. A 401 shows none: the token dialog
 * (askToken) already says what is needed.
 */
export function showError(what, err) {
  if (err instanceof ApiError && err.status === 401) return;
  const detail = err instanceof ApiError && err.code && !err.code.startsWith('http_') && err.code !== 'network'
    ? `${err.message} (${err.code})` : err.message;
  toast(what, detail);
}
