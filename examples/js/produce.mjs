// A jetrun producer in JavaScript, written from docs/protocol.md alone, with
// the official NATS client (npm "nats"). It dispatches a run with a plain
// JetStream publish, follows the run's events from the stream (one ordered
// consumer: history, then live), answers the run's wait with a signal,
// replays the events again from a stream sequence, and reads the final row.
// It prints the durable steps the run stores (name, size, attempt).
//
//   npm ci
//   node produce.mjs --agent demo --input '{"steps":3,"stepMs":100,"approveAt":2}' \
//     --signal approve --payload '{"approved":true}'
//
// Each line of output is one thing that happened, as JSON.

import { parseArgs } from "node:util";
import { connect, DeliverPolicy, JSONCodec } from "nats";

const { values: opt } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    prefix: { type: "string", default: "jetrun" },
    agent: { type: "string", default: "demo" },
    "run-id": { type: "string", default: `js-${Date.now()}` },
    input: { type: "string", default: '{"steps":3,"stepMs":100,"approveAt":2}' },
    signal: { type: "string", default: "approve" },
    payload: { type: "string", default: '{"approved":true}' },
    timeout: { type: "string", default: "60000" },
  },
});

const prefix = opt.prefix;
const stream = prefix.toUpperCase() + "_EVENTS"; // JETRUN_EVENTS
const bucket = prefix + "_runs";
const id = opt["run-id"];
const final = new Set(["completed", "error", "aborted"]);
const jc = JSONCodec();
const say = (what, fields) => console.log(JSON.stringify({ what, ...fields }));

const nc = await connect({ servers: opt.nats.split(","), name: "jetrun js producer" });
const js = nc.jetstream();
const timer = setTimeout(() => {
  say("timeout", { ms: Number(opt.timeout) });
  process.exit(2);
}, Number(opt.timeout));

// 1. Dispatch: a plain publish to <prefix>.dispatch.<agentType>, with
// Nats-Msg-Id = runId so a re-publish is stored once.
const since = new Date(Date.now() - 60_000); // the run's events start after this (clock skew allowed)
const ack = await js.publish(`${prefix}.dispatch.${opt.agent}`,
  jc.encode({ runId: id, input: JSON.parse(opt.input) }), { msgID: id });
say("dispatched", { runId: id, stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate });

// 2. Follow: one ordered consumer filtered on <prefix>.run.<id>.>, started at
// a time before the run existed (the row's firstEventSeq once known).
const follow = await js.consumers.get(stream, {
  filterSubjects: [`${prefix}.run.${id}.>`],
  deliver_policy: DeliverPolicy.StartTime,
  opt_start_time: since.toISOString(),
});
const seen = [];
let signalled = false;
let lastSeq = 0;
const messages = await follow.consume();
for await (const m of messages) {
  const kind = m.subject.split(".").pop();
  const body = m.json();
  seen.push({ seq: m.seq, kind });
  lastSeq = m.seq;
  say("event", { seq: m.seq, kind, attempt: m.headers?.get("Jetrun-Attempt"), body });
  // A durable step (docs/protocol.md, Steps): stored once per run and name.
  if (kind === "step") {
    say("step", { name: body.name, bytes: JSON.stringify(body.output ?? null).length, attempt: body.attempt,
      at: body.at, durationMs: body.durationMs ?? 0, failed: body.error !== undefined });
  }
  // 3. Signal: the run waits; publish the payload to <prefix>.signal.<id>.<name>.
  if (kind === "signal" && body.state === "waiting" && body.name === opt.signal && !signalled) {
    const s = await js.publish(`${prefix}.signal.${id}.${opt.signal}`, new TextEncoder().encode(opt.payload));
    signalled = true;
    say("signalled", { name: opt.signal, seq: s.seq });
  }
  if (kind === "status" && final.has(body.status)) {
    break;
  }
}
messages.stop();

// 4. Resume by stream sequence: start after an event seen (here, the first
// milestone's) and get exactly the events after it, with no gap.
const from = (seen.find((e) => e.kind === "milestone") ?? seen[0]).seq;
const replay = await js.consumers.get(stream, {
  filterSubjects: [`${prefix}.run.${id}.>`],
  deliver_policy: DeliverPolicy.StartSequence,
  opt_start_seq: from + 1,
});
const again = [];
while (again.length === 0 || again[again.length - 1] < lastSeq) {
  const m = await replay.next({ expires: 5000 });
  if (m) again.push(m.seq);
}
const expected = seen.filter((e) => e.seq > from).map((e) => e.seq);
say("replayed", { after: from, seqs: again, sameAsFollowed: JSON.stringify(again) === JSON.stringify(expected) });

// 5. The final row: key <id> in the KV bucket <prefix>_runs.
const kv = await js.views.kv(bucket, { bindOnly: true });
const entry = await kv.get(id);
const row = entry.json();
say("row", { revision: entry.revision, row });
say("final", { runId: id, status: row.status, summary: row.summary ?? "", error: row.error ?? "" });

clearTimeout(timer);
await nc.drain();
