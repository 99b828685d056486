// A child exercising every verb of the child side; the tests steer it with
// its input. Each step's work appends "<step> <attempt>" to the ledger file,
// so a test counts how often the work ran.
import { appendFileSync, existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { child, Failure } from '../../index.js';

await child(async (run) => {
  const { ledger, turns = 3, hold, wait, call, fail, failOnAttempt } = run.input;
  run.progress(0, { phase: 'thinking', message: `${turns} turns` });
  const words = [];
  for (let i = 1; i <= turns; i++) {
    const out = await run.step(`think-${i}`, async () => {
      if (ledger) appendFileSync(ledger, `think-${i} ${run.attempt}\n`);
      while (hold && existsSync(`${hold}.${i}`)) await sleep(20);
      run.usage({ inputTokens: 10, outputTokens: 5, costMicros: 100, model: 'mock-1' });
      return { word: `w${i}` };
    });
    run.chunk(`${out.word} `);
    words.push(out.word);
  }
  run.milestone('thought', { turns });
  let payload = null;
  let reply = null;
  if (wait) payload = await run.wait(wait);
  if (call) reply = await run.call(call, { words });
  run.progress(1, { phase: 'done' });
  run.usage({ inputTokens: 1 });
  if (fail && (!failOnAttempt || failOnAttempt === run.attempt)) throw new Failure(fail.message, { retryable: fail.retryable });
  if (run.input.crash) throw new Error('plain error');
  return { summary: words.join(' '), output: { words, attempt: run.attempt, payload, reply } };
});
