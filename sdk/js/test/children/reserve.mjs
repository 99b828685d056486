// A child that reserves before each (pretend) model call and reports what
// it spent, until a reservation is refused.
import { child } from '../../index.js';

await child(async (run) => {
  const got = [];
  for (let i = 0; i < 5; i++) {
    const r = await run.reserve({ inputTokens: run.input.each });
    got.push(r.ok ? 'ok' : r.reason);
    if (!r.ok) break;
    run.usage({ inputTokens: run.input.each });
  }
  return { output: got };
});
