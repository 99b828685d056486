// Types of the jetrun package (hand-written; test/types.ts checks them with tsc --noEmit).

/** JSON, as runs take and give it. */
export type JSONValue = string | number | boolean | null | JSONValue[] | { [key: string]: JSONValue };

/** What a piece of work spent; every field optional, reports add up. */
export interface Usage {
  inputTokens?: number;
  outputTokens?: number;
  /** In millionths of whatever currency unit you count in. */
  costMicros?: number;
  /** At most 128 bytes. */
  model?: string;
}

/** A milestone the run reached, by an earlier attempt or this one. */
export interface Milestone {
  sequence: number;
  name: string;
  data?: JSONValue;
}

/** The request a child receives for one attempt (docs/protocol.md, "The request"). */
export interface Request<I = JSONValue> {
  runId: string;
  agentType: string;
  attempt: number;
  input: I;
  milestones: Milestone[];
  steps: Record<string, JSONValue>;
  parent?: string;
  parentToolCallId?: string;
  depth: number;
  /** Set for a run dispatched under a session key (docs/protocol.md, "Sub-agents"). */
  session?: string;
  history?: SessionTurn[];
}

/** An earlier turn of a run's session, as Run.history lists it. */
export interface SessionTurn {
  runId: string;
  status: string;
  input?: JSONValue;
  output?: JSONValue;
  summary?: string;
  error?: string;
  steps?: { name: string; output?: JSONValue }[];
}

/** What a handler returns: the run completes with it. */
export interface Result {
  summary?: string;
  output?: unknown;
}

/** A failure the run ends with; retryable ones are tried again as a new attempt. */
export class Failure extends Error {
  constructor(message: string, opts?: { retryable?: boolean; retryAfterMs?: number; cause?: unknown });
  readonly retryable: boolean;
  readonly retryAfterMs: number;
}

/** The error reply to a call. */
export class CallError extends Error {
  readonly call: string;
  readonly reason: string;
}

/** What a wait or call asks a person (issue 37's asks; ignored by a worker without them). */
export interface Ask {
  kind?: 'approve' | 'choose' | 'form';
  title?: string;
  payload?: unknown;
  choices?: unknown[];
  schema?: Record<string, unknown>;
  deadlineMs?: number;
  default?: unknown;
}

/** Options of a nested run started by a child. */
export interface ChildRunOptions {
  /** The tool call (or any name unique in the run) the nested run is for: its id derives from it. */
  callId: string;
  client?: Client;
  displayOrder?: number;
  /** Makes the child a turn of a sub-agent session. */
  session?: string;
}

/** One attempt of a run, as a child sees it. */
export class Run<I = JSONValue> {
  readonly request: Request<I>;
  readonly id: string;
  readonly agentType: string;
  readonly attempt: number;
  readonly input: I;
  readonly milestones: Milestone[];
  readonly parent: string | undefined;
  readonly depth: number;
  /** The sub-agent session the run is a turn of, if any. */
  readonly session: string | undefined;
  /** The session's earlier turns, oldest first. */
  readonly history: SessionTurn[];
  /** Steps stored so far, by name. */
  readonly steps: Record<string, JSONValue>;
  reached(name: string): boolean;
  chunk(data: unknown): void;
  progress(fraction: number, opts?: { phase?: string; message?: string; data?: unknown }): void;
  milestone(name: string, data?: unknown): void;
  /**
   * Inside a step's function, the step's usage; else the run's. answeredAtMs:
   * when the provider answered the model call (Unix ms), for a provider limit.
   */
  usage(u: Usage & { answeredAtMs?: number }): void;
  /** The stored output of step name, else fn's, stored first. */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T>;
  /** Waits for a signal and returns its payload; a takeover waits again (wrap it in a step to store it). */
  wait<T = JSONValue>(name: string, opts?: { ask?: Ask }): Promise<T>;
  /** Asks the run's caller; a failed reply throws CallError. */
  call<T = JSONValue>(name: string, input?: unknown, opts?: { ask?: Ask }): Promise<T>;
  /** Holds spend against the tree's budget (and, with limit, a provider limit's room); the next usage report settles it. */
  reserve(amount: { inputTokens?: number; outputTokens?: number; costMicros?: number; limit?: string }): Promise<{ ok: boolean; reason?: string; error?: string }>;
  /** Runs agentType as a nested run and waits for its outcome. */
  runChild<O = JSONValue>(agentType: string, input: unknown, opts: ChildRunOptions): Promise<Outcome<O>>;
  /** The input's "variables" with the run's changes (its variables.<attempt>.<n> steps). */
  variables(): Record<string, JSONValue>;
  /** Sets a variable, stored as a durable step; a sub-agent's caller gets those it changed. */
  setVariable(key: string, value: unknown): Promise<void>;
}

/** Serves one run of the exec agent type with handler. */
export function child<I = JSONValue>(
  handler: (run: Run<I>) => Promise<Result | void> | Result | void,
  opts?: { input?: NodeJS.ReadableStream; output?: NodeJS.WritableStream; client?: Client },
): Promise<void>;

/** The id jetrun gives the nested run parent starts for callId (Go: parent.RunID). */
export function childRunId(parent: string, callId: string): string;

/** A delegate: an agent type offered as the tool task_<agentType> (name and description overridable). */
export interface Delegate { agentType: string; name?: string; description?: string; session?: string }
/** The sub-agents a run offers its model (docs/protocol.md, "Sub-agents"). */
export interface SubAgents { delegates?: Delegate[]; dynamicType?: string; pool?: string[]; client?: Client }
/** The name of the tool that creates and runs a dynamic agent. */
export const DYNAMIC_TOOL: 'create_and_run_agent';
/** OpenAI-format tool definitions of subs. */
export function subAgentTools(run: Run<any>, subs: SubAgents): { type: 'function'; function: { name: string; description: string; parameters: JSONValue } }[];
/** Runs a model's tool call of subs as a nested run; answers the text the model reads. */
export function runSubAgent(run: Run<any>, subs: SubAgents, callId: string, name: string, args: unknown): Promise<string>;

/** A run's status. */
export type Status = 'queued' | 'starting' | 'running' | 'completed' | 'error' | 'aborted' | 'interrupted';

/** A run's row as the HTTP API answers it (the fields most callers read; more are there). */
export interface RunRow {
  id: string;
  agentType: string;
  status: Status;
  input?: JSONValue;
  output?: JSONValue;
  summary?: string;
  error?: string;
  reason?: string;
  retryable?: boolean;
  childStillRunning?: boolean;
  attempt?: number;
  parent?: string;
  parentToolCallId?: string;
  depth?: number;
  milestones?: number;
  chunks?: number;
  usage?: Usage & { models?: Record<string, Usage> };
  live: boolean;
  final: boolean;
  [field: string]: unknown;
}

/** A completed run's outcome. */
export interface Outcome<O = JSONValue> {
  ok: true;
  runId: string;
  status: 'completed';
  summary: string;
  output: O;
}

/** What a dispatch may carry besides agent type and input (docs/protocol.md, "Dispatch"). */
export interface DispatchOptions {
  runId?: string;
  parent?: string;
  parentToolCallId?: string;
  displayOrder?: number;
  depth?: number;
  detached?: { onFinish?: string; onMilestones?: string[]; maxBudgetMs?: number; noProgressBudgetMs?: number };
  maxConcurrent?: number;
  concurrencyKey?: string;
  /** Makes the run a turn of a sub-agent session (docs/protocol.md, "Sub-agents"). */
  session?: string;
  strategy?: 'queue' | 'latest' | 'drop' | 'debounce' | 'merge';
  debounceMs?: number;
  budget?: { tokens?: number; costMicros?: number; runs?: number };
  signal?: AbortSignal;
}

/** A server-sent event of a run's stream. */
export interface StreamEvent {
  /** The stream sequence (`<seq>.<part>` inside a coalesced chunk event); absent on caught-up and end. */
  id?: string;
  /** status, chunk, progress, milestone, signal, step, call, reply, child-chunk, caught-up, end, history-end. */
  event: string;
  data: any;
}

/** An HTTP answer that is not a success. */
export class APIError extends Error {
  readonly status: number;
  readonly code: string;
}

/** A run that did not complete. */
export class RunFailure extends Error {
  readonly runId: string;
  readonly status: Status;
  readonly error: string;
  readonly retryable: boolean;
  readonly reason?: string;
  readonly childStillRunning?: boolean;
}

/** A caller of jetrun's HTTP API. */
export class Client {
  constructor(opts?: { url?: string; token?: string; fetch?: typeof fetch; reconnectDelayMs?: number; maxReconnects?: number });
  readonly url: string;
  request<T = any>(method: string, path: string, body?: unknown, opts?: { signal?: AbortSignal }): Promise<T>;
  dispatch(agentType: string, input: unknown, opts?: DispatchOptions): Promise<RunRow>;
  run<O = JSONValue>(agentType: string, input: unknown, opts?: DispatchOptions): Promise<Outcome<O>>;
  get(runId: string, opts?: { signal?: AbortSignal }): Promise<RunRow>;
  await<O = JSONValue>(runId: string, opts?: { signal?: AbortSignal }): Promise<Outcome<O>>;
  stream(runId: string, opts?: { after?: string; follow?: boolean; signal?: AbortSignal }): AsyncGenerator<StreamEvent>;
  cancel(runId: string, reason?: string): Promise<RunRow>;
  signal(runId: string, name: string, payload?: unknown): Promise<unknown>;
  calls(runId: string): Promise<{ calls: Array<Record<string, unknown>> }>;
  reply(runId: string, seq: number, answer: { output?: unknown; error?: string }): Promise<unknown>;
  answer(askId: string, answer: { digest: string; value: unknown; by?: string }): Promise<unknown>;
  asks(filter?: Record<string, string>): Promise<{ asks: Array<Record<string, unknown>> }>;
  rerun(runId: string, opts: {
    fromStep: string; input?: unknown; steps?: Record<string, unknown>; runId?: string; budget?: { tokens?: number; costMicros?: number; runs?: number };
  }): Promise<RunRow>;
  diff(a: string, b: string): Promise<Record<string, unknown>>;
}

/** Parses a text/event-stream body. */
export function parseSSE(body: AsyncIterable<Uint8Array>): AsyncGenerator<StreamEvent>;

/** Publishes dispatches over NATS. */
export interface NatsDispatcher {
  readonly prefix: string;
  dispatch(agentType: string, input: unknown, opts?: Omit<DispatchOptions, 'maxConcurrent' | 'signal'> & {
    msgId?: string; traceparent?: string; tracestate?: string;
  }): Promise<{ runId: string; seq: number; duplicate: boolean }>;
  close(): Promise<void>;
}

/** Connects to NATS (the nats package's connect options, e.g. servers, user, pass) for dispatching. */
export function connectNats(opts?: { servers?: string | string[]; prefix?: string; [option: string]: unknown }): Promise<NatsDispatcher>;
