// Dispatch over NATS, for services that publish: a JetStream publish to
// <prefix>.dispatch.<agentType> with Nats-Msg-Id = the run id (docs/protocol.md,
// "Dispatch"). The worker that takes it creates the run's row.

import { randomUUID } from 'node:crypto';
import { connect, headers as natsHeaders } from 'nats';
import { checkToken } from './runid.js';

const FIELDS = ['parent', 'parentToolCallId', 'displayOrder', 'depth', 'detached', 'concurrencyKey', 'strategy',
  'debounceMs', 'budget', 'traceparent', 'tracestate'];

/** NatsDispatcher publishes dispatches on a NATS connection. */
export class NatsDispatcher {
  /**
   * @param {import('nats').NatsConnection} nc
   * @param {{prefix?: string, owned?: boolean}} [opts] prefix: JETRUN_PREFIX (default "jetrun")
   */
  constructor(nc, opts = {}) {
    this.nc = nc;
    this.js = nc.jetstream();
    this.prefix = opts.prefix ?? 'jetrun';
    this.owned = Boolean(opts.owned);
  }

  /**
   * Connects to NATS (the nats package's connect options: servers, user,
   * pass, token, authenticator …) and returns a dispatcher that closes the
   * connection on close().
   * @param {import('nats').ConnectionOptions & {prefix?: string}} opts
   */
  static async connect(opts = {}) {
    const { prefix, ...rest } = opts;
    const nc = await connect({ name: 'jetrun js dispatcher', ...rest });
    return new NatsDispatcher(nc, { prefix, owned: true });
  }

  /**
   * Publishes a dispatch and answers {runId, seq, duplicate} once the stream
   * stored it. Without opts.runId the run gets a fresh id. The same run id
   * again within the stream's dedup window is stored once (duplicate: true);
   * after it, the worker finds the run's row and drops the copy.
   * @param {string} agentType @param {unknown} input
   * @param {{runId?: string, msgId?: string} & Record<string, unknown>} [opts]
   */
  async dispatch(agentType, input, opts = {}) {
    checkToken('agent type', agentType);
    if (input === undefined || input === null) throw new TypeError('a run needs an input (any JSON value but null)');
    const runId = opts.runId ?? `js-${randomUUID()}`;
    checkToken('run id', runId);
    const body = { runId, input };
    for (const k of FIELDS) if (opts[k] !== undefined) body[k] = opts[k];
    const h = natsHeaders();
    if (opts.traceparent) h.set('traceparent', String(opts.traceparent));
    if (opts.tracestate) h.set('tracestate', String(opts.tracestate));
    const ack = await this.js.publish(`${this.prefix}.dispatch.${agentType}`, new TextEncoder().encode(JSON.stringify(body)),
      { msgID: opts.msgId ?? runId, headers: h });
    return { runId, seq: ack.seq, duplicate: ack.duplicate };
  }

  /** Drains and closes the connection if connect() opened it. */
  async close() {
    if (this.owned) await this.nc.drain();
  }
}
