// The test double of agent.mjs: the AI SDK's own MockLanguageModelV3
// (ai/test) playing a script — call the weather tool for each city of the
// prompt, then answer in streamed tokens — and a weather service. Both write
// a line per call to the run input's "ledger" file, so a test counts the
// calls; a tool call for a city waits while the file "<hold>.<city>" exists.

import { appendFileSync, existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { simulateReadableStream } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';

const CITIES = ['Paris', 'Oslo'];

function usage(input, output) {
  return {
    inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: output, text: output, reasoning: undefined },
  };
}

/** The script: the next part of the conversation, from the tool results so far. */
function next(prompt) {
  const results = prompt.filter((m) => m.role === 'tool').flatMap((m) => m.content.filter((c) => c.type === 'tool-result'));
  if (results.length < CITIES.length) {
    const city = CITIES[results.length];
    return [
      { type: 'stream-start', warnings: [] },
      { type: 'response-metadata', id: `resp-${results.length + 1}`, modelId: 'mock-weather', timestamp: new Date(0) },
      { type: 'tool-call', toolCallId: `call-${city.toLowerCase()}`, toolName: 'weather', input: JSON.stringify({ city }) },
      { type: 'finish', finishReason: { unified: 'tool-calls', raw: undefined }, usage: usage(100 + 10 * results.length, 20) },
    ];
  }
  const words = results.map((r) => `${r.output.value.city} has ${r.output.value.weather}.`).join(' ').split(' ');
  return [
    { type: 'stream-start', warnings: [] },
    { type: 'text-start', id: 'text-1' },
    ...words.map((w, i) => ({ type: 'text-delta', id: 'text-1', delta: i === 0 ? w : ` ${w}` })),
    { type: 'text-end', id: 'text-1' },
    { type: 'finish', finishReason: { unified: 'stop', raw: undefined }, usage: usage(150, words.length) },
  ];
}

/** The script's parts as a generate result: the text deltas joined. */
function generated(parts) {
  const content = [];
  let text = '';
  for (const p of parts) {
    if (p.type === 'tool-call') content.push(p);
    if (p.type === 'text-delta') text += p.delta;
  }
  if (text) content.push({ type: 'text', text });
  const finish = parts.find((p) => p.type === 'finish');
  const meta = parts.find((p) => p.type === 'response-metadata');
  return { content, finishReason: finish.finishReason, usage: finish.usage, warnings: [], response: meta && { id: meta.id, modelId: meta.modelId, timestamp: meta.timestamp } };
}

/** The mock model of a run. @param {import('jetrun').Run} run */
export function scriptedModel(run) {
  const note = (prompt) => {
    const turn = prompt.filter((m) => m.role === 'tool').length + 1;
    if (run.input.ledger) appendFileSync(run.input.ledger, `model turn-${turn} attempt-${run.attempt}\n`);
  };
  return new MockLanguageModelV3({
    modelId: 'mock-weather',
    doStream: async ({ prompt }) => {
      note(prompt);
      return { stream: simulateReadableStream({ chunks: next(prompt), chunkDelayInMs: 1 }) };
    },
    doGenerate: async ({ prompt }) => {
      note(prompt);
      return generated(next(prompt));
    },
  });
}

/** The weather service of a run. @param {import('jetrun').Run} run */
export function weatherService(run) {
  return async (city) => {
    if (run.input.ledger) appendFileSync(run.input.ledger, `tool ${city} attempt-${run.attempt}\n`);
    while (run.input.hold && existsSync(`${run.input.hold}.${city}`)) await sleep(20);
    return { paris: 'sunny, 21°C', oslo: 'snow, -3°C' }[city.toLowerCase()] ?? 'unknown';
  };
}
