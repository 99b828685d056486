// A jetrun bulk producer in JavaScript, from docs/protocol.md alone
// ("Dispatching many"), with the official NATS client (npm "nats"): it
// publishes many dispatches without waiting for each acknowledgement — a
// window of them in flight — and then waits for every one. Each dispatch
// carries Nats-Msg-Id = its run id, so running it again within the
// stream's dedup window stores nothing new (each ack says "duplicate").
//
//   npm ci
//   node bulk.mjs --agent demo --count 10000 --id-prefix batch-1- --input '{"steps":1,"stepMs":0}'
//
// It prints one JSON line per failed publish and one summary line.

import { parseArgs } from "node:util";
import { connect, JSONCodec } from "nats";

const { values: opt } = parseArgs({
  options: {
    nats: { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    prefix: { type: "string", default: "jetrun" },
    agent: { type: "string", default: "demo" },
    count: { type: "string", default: "1000" },
    "id-prefix": { type: "string", default: `bulk-${Date.now()}-` },
    input: { type: "string", default: '{"steps":1,"stepMs":0}' },
    window: { type: "string", default: "1000" },
  },
});

const count = Number(opt.count);
const window = Number(opt.window);
const input = JSON.parse(opt.input);
const jc = JSONCodec();
const say = (what, fields) => console.log(JSON.stringify({ what, ...fields }));

const nc = await connect({ servers: opt.nats.split(","), name: "jetrun js bulk producer" });
const js = nc.jetstream();
const subject = `${opt.prefix}.dispatch.${opt.agent}`;

// Publish without awaiting: each call returns a promise of its ack. Keep at
// most `window` unacknowledged, then wait for all of them.
const started = Date.now();
let stored = 0;
let duplicates = 0;
let failed = 0;
let inFlight = [];
const settle = async () => {
  for (const r of await Promise.allSettled(inFlight)) {
    if (r.status === "rejected") {
      failed++;
      say("failed", { runId: r.reason.runId, error: String(r.reason.error?.message ?? r.reason.error) });
    } else if (r.value.duplicate) {
      duplicates++;
    } else {
      stored++;
    }
  }
  inFlight = [];
};
for (let i = 0; i < count; i++) {
  const runId = `${opt["id-prefix"]}${i}`;
  inFlight.push(
    js.publish(subject, jc.encode({ runId, input }), { msgID: runId })
      .catch((error) => Promise.reject({ runId, error })),
  );
  if (inFlight.length >= window) {
    await settle();
  }
}
await settle();
say("done", { count, stored, duplicates, failed, ms: Date.now() - started });
await nc.drain();
process.exit(failed === 0 ? 0 : 1);
