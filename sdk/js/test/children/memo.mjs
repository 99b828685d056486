// A persistent sub-agent: run under a session key, each turn sees the
// session's earlier turns in run.history, with their steps. It stores the
// step "heard" (its objective) and answers with what the session heard
// before, in order.
import { child } from '../../index.js';

await child(async (run) => {
  const objective = run.input?.objective ?? '';
  await run.step('heard', () => objective);
  const heard = run.history.map((turn) => (turn.steps ?? []).find((s) => s.name === 'heard')?.output ?? null);
  return { summary: `heard ${heard.length} before`, output: { session: run.session, heard, attempt: run.attempt } };
});
