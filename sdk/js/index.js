// jetrun for Node: a child of the exec agent type (child, Run, Failure), a
// caller over the HTTP API (Client), and dispatch over NATS (NatsDispatcher).

export { child, Run, Failure, CallError } from './child.js';
export { Client, APIError, RunFailure, parseSSE } from './client.js';
export { childRunId } from './runid.js';
export { subAgentTools, runSubAgent, DYNAMIC_TOOL } from './subagents.js';

/**
 * The NATS dispatcher, loaded on first use so a child or an HTTP caller
 * never loads the nats package.
 * @param {import('nats').ConnectionOptions & {prefix?: string}} [opts]
 */
export async function connectNats(opts = {}) {
  const { NatsDispatcher } = await import('./nats.js');
  return NatsDispatcher.connect(opts);
}
