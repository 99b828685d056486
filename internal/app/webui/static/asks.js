// asks.js: the inbox: what runs wait on people for (GET /v1/asks), the
// count of open asks in the header, and answering an ask in place
// (POST /v1/asks/{id}:answer), the run one click away.

import { h, put, setText } from './dom.js';
import { api, showError, toast } from './api.js';
import { fmtAgo, fmtJSON, parseTime } from './format.js';

const listeners = new Set();
let source = null;
let retry = null;

/** followAsks calls fn on every ask that changes; returns the unsubscribe. */
function followAsks(fn) {
  listeners.add(fn);
  openStream();
  return () => listeners.delete(fn);
}

function openStream() {
  if (source || retry) return;
  source = new EventSource('/v1/asks/live');
  source.addEventListener('hello', () => listeners.forEach((fn) => fn(null)));
  source.addEventListener('ask', (e) => {
    let a = null;
    try { a = JSON.parse(e.data); } catch { return; }
    listeners.forEach((fn) => fn(a));
  });
  source.onerror = () => {
    source.close();
    source = null;
    retry = setTimeout(() => { retry = null; openStream(); }, 3000);
  };
}

/** startAskCount keeps the header's count of open asks up to date. */
export function startAskCount() {
  const el = document.getElementById('ask-count');
  if (!el) return;
  let timer = null;
  const refresh = async () => {
    try {
      const page = await api('GET', '/v1/asks?status=open&limit=1');
      setText(el, String(page.total));
      el.dataset.count = String(page.total);
    } catch {
      // the count waits for the next change
    }
  };
  followAsks(() => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 100);
  });
  refresh();
}

/** AsksPage lists the open asks and answers them in place. */
export class AsksPage {
  constructor(root) {
    this.root = root;
    document.title = 'Inbox · jetrun';
    this.list = h('div', { class: 'asks', 'data-testid': 'asks' });
    this.empty = h('p', { class: 'muted', 'data-testid': 'asks-empty', text: 'Nothing waits for anyone.' });
    put(root, h('section', { class: 'panel' }, h('h2', { text: 'Inbox: what runs wait on people for' }), this.list));
    this.cards = new Map(); // id → card
    this.timer = null;
    this.stop = followAsks((a) => (a ? this.update(a) : this.load()));
    this.load();
  }

  destroy() {
    this.stop();
    clearTimeout(this.timer);
  }

  async load() {
    try {
      const page = await api('GET', '/v1/asks?status=open&limit=200');
      for (const a of page.asks) this.update(a);
      if (!page.asks.length && !this.cards.size) put(this.list, this.empty);
    } catch (err) {
      showError('Could not list the asks', err);
    }
  }

  update(a) {
    let card = this.cards.get(a.id);
    if (!card) {
      if (a.status !== 'open') return; // an answered ask never shown here
      this.empty.remove();
      card = this.card(a);
      this.cards.set(a.id, card);
      this.list.prepend(card);
    }
    card.dataset.status = a.status;
    if (a.status !== 'open') this.settled(card, a);
  }

  settled(card, a) {
    const state = card.querySelector('[data-testid="ask-state"]');
    const by = a.answer ? `answered by ${a.answer.by}` : `closed: ${a.closedReason || 'the wait ended'}`;
    setText(state, by);
    for (const b of card.querySelectorAll('button, textarea')) b.disabled = true;
  }

  card(a) {
    const state = h('span', { class: 'ask-state', 'data-testid': 'ask-state', text: `asked ${fmtAgo(parseTime(a.askedAt))}` });
    const problem = h('p', { class: 'ask-problem', role: 'alert', 'data-testid': 'ask-problem' });
    const card = h('article', { class: 'ask', 'data-testid': 'ask', dataset: { id: a.id, run: a.runId } },
      h('header', {},
        h('b', { class: 'ask-title', text: a.title || `${a.kind}: ${a.name}` }),
        h('span', { class: 'badge', text: a.kind }),
        h('a', { href: `/runs/${encodeURIComponent(a.runId)}`, 'data-testid': 'ask-run', text: a.runId }),
        h('span', { class: 'muted', text: a.agentType }),
        state),
      a.payload !== undefined ? h('pre', { class: 'ask-payload', text: fmtJSON(a.payload, 2) }) : null,
      h('div', { class: 'ask-answer' }, this.controls(a, problem)),
      problem);
    return card;
  }

  controls(a, problem) {
    const send = (value) => this.answer(a, value, problem);
    switch (a.kind) {
      case 'approve':
        return [
          h('button', { class: 'btn primary', 'data-testid': 'ask-approve', text: 'Approve', onclick: () => send({ approved: true }) }),
          h('button', { class: 'btn', 'data-testid': 'ask-reject', text: 'Reject', onclick: () => send({ approved: false }) }),
        ];
      case 'choose':
        return (a.choices || []).map((c) => h('button', { class: 'btn', 'data-testid': 'ask-choice', text: c, onclick: () => send({ choice: c }) }));
      default: {
        const area = h('textarea', { rows: 3, 'data-testid': 'ask-value', placeholder: 'the answer, as JSON', 'aria-label': 'answer' });
        return [area, h('button', { class: 'btn primary', 'data-testid': 'ask-submit', text: 'Answer', onclick: () => {
          let v;
          try { v = JSON.parse(area.value || 'null'); } catch (err) { setText(problem, `not JSON: ${err.message}`); return; }
          send(v);
        } })];
      }
    }
  }

  async answer(a, value, problem) {
    setText(problem, '');
    try {
      const got = await api('POST', `/v1/asks/${encodeURIComponent(a.id)}:answer`, { digest: a.digest, value });
      this.update(got);
      toast('Answered', `${a.runId} goes on`, 'info');
    } catch (err) {
      setText(problem, err.message);
      if (err.status !== 409 && err.status !== 422) showError('Could not answer', err);
    }
  }
}
