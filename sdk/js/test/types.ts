// Compiled by types.test.mjs with tsc --noEmit: the package's types describe
// what a TypeScript child and caller write.
import { child, Client, Failure, RunFailure, connectNats, childRunId, type Outcome, type StreamEvent } from 'jetrun';

interface Input { question: string; turns: number }

await child<Input>(async (run) => {
  const turns: number = run.input.turns;
  for (let i = 1; i <= turns; i++) {
    const plan = await run.step(`plan-${i}`, async () => {
      run.usage({ inputTokens: 10, outputTokens: 2, model: 'm' });
      return { query: run.input.question, i };
    });
    const q: string = plan.query;
    run.chunk(q);
  }
  const r = await run.reserve({ inputTokens: 100 });
  if (!r.ok) throw new Failure(r.error ?? 'no budget');
  const slot = await run.reserve({ limit: 'openai-gpt' });
  if (!slot.ok) throw new Failure(slot.error ?? 'no limit', { retryable: true, retryAfterMs: 1000 });
  run.progress(0.5, { phase: 'half' });
  run.milestone('planned', { turns });
  const ok = await run.wait<{ approved: boolean }>('approve');
  if (!ok.approved) throw new Failure('rejected', { retryable: false });
  const reply = await run.call<string>('ask-user', { q: 1 });
  const sub: Outcome<{ n: number }> = await run.runChild('researcher', { topic: reply }, { callId: 'task_researcher:1' });
  return { summary: `done ${sub.output.n}`, output: { reply } };
});

const client = new Client({ url: 'http://127.0.0.1:8080' });
const row = await client.dispatch('demo', { steps: 1 }, { runId: 'x', budget: { tokens: 10 } });
const live: boolean = row.live;
for await (const ev of client.stream(row.id, { after: '3' })) {
  const e: StreamEvent = ev;
  void e.event;
}
try {
  const out = await client.run<{ words: number }>('wordcount', { text: 'a b' });
  const words: number = out.output.words;
  void words;
} catch (err) {
  if (err instanceof RunFailure) { const r: boolean = err.retryable; void r; }
}
await client.cancel('x', 'why');
await client.signal('x', 'approve', { approved: true });
await client.answer('ask-1', { digest: 'd', value: { approved: true } });
await client.rerun('x', { fromStep: 'plan-2', input: { steps: 2 }, runId: 'x2' });
await client.diff('x', 'x2');
const nats = await connectNats({ servers: 'nats://127.0.0.1:4222' });
const d: { runId: string; duplicate: boolean } = await nats.dispatch('demo', { steps: 1 }, { runId: 'y' });
await nats.close();
const id: string = childRunId('r1', 'call-7');
void live; void d; void id;

// @ts-expect-error a step name is a string
await child(async (run) => { await run.step(1, () => 1); });
