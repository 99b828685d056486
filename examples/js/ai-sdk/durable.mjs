// Durability for a Vercel AI SDK (`ai`) agent, without rewriting it: wrap
// its model and its tools with a jetrun run, and every model call and every
// tool call becomes a jetrun step — done once per run, whatever crashes:
// an attempt that takes the run over gets the stored results back instead
// of calling the model or the tool again. Streamed tokens become the run's
// chunks as they come; each call's usage, as the SDK reports it, is stored
// with its step and counted on the run once.
//
//   const model = durableModel(run, openai('gpt-4o-mini'));
//   const tools = durableTools(run, { weather });
//   const result = streamText({ model, tools, stopWhen: stepCountIs(5), prompt });

import { simulateReadableStream, wrapLanguageModel } from 'ai';

/** A step name from a tool call id (letters, digits, - _ . : only). */
function stepName(prefix, id) {
  return `${prefix}-${String(id).replace(/[^A-Za-z0-9_.:-]/g, '_')}`.slice(0, 128);
}

/** Reports an AI SDK usage (LanguageModelV3Usage) on the run. */
function report(run, usage, model) {
  if (!usage) return;
  run.usage({ inputTokens: usage.inputTokens?.total ?? 0, outputTokens: usage.outputTokens?.total ?? 0, model });
}

/** Dates come back from a stored step as strings. */
function reviveResponse(r) {
  return r && r.timestamp ? { ...r, timestamp: new Date(r.timestamp) } : r;
}

/**
 * The model, each call of which (generate or stream) is a step "model-1",
 * "model-2" …: numbered in the order the agent makes them, which a replay
 * repeats, since every earlier call returns its stored result.
 * @param {import('jetrun').Run} run
 * @param {import('ai').LanguageModel} model
 * @param {{prefix?: string}} [opts]
 */
export function durableModel(run, model, opts = {}) {
  const prefix = opts.prefix ?? 'model';
  let n = 0;
  const modelId = typeof model === 'string' ? model : model.modelId;
  return wrapLanguageModel({
    model,
    middleware: {
      specificationVersion: 'v3',
      wrapGenerate: async ({ doGenerate }) => {
        const r = await run.step(`${prefix}-${++n}`, async () => {
          const res = await doGenerate();
          report(run, res.usage, modelId);
          return {
            content: res.content, finishReason: res.finishReason, usage: res.usage, warnings: res.warnings ?? [],
            providerMetadata: res.providerMetadata, response: res.response && { id: res.response.id, modelId: res.response.modelId, timestamp: res.response.timestamp },
          };
        });
        return { ...r, response: reviveResponse(r.response) };
      },
      wrapStream: async ({ doStream }) => {
        const parts = await run.step(`${prefix}-${++n}`, async () => {
          const { stream } = await doStream();
          const kept = [];
          for await (const part of stream) {
            if (part.type === 'error') throw part.error instanceof Error ? part.error : new Error(JSON.stringify(part.error));
            if (part.type === 'raw') continue;
            if (part.type === 'text-delta') run.chunk(part.delta); // live, as the model streams
            if (part.type === 'finish') report(run, part.usage, modelId);
            kept.push(part);
          }
          return kept;
        });
        const revived = parts.map((p) => (p.type === 'response-metadata' ? reviveResponse(p) : p));
        return { stream: simulateReadableStream({ chunks: revived, initialDelayInMs: null, chunkDelayInMs: null }) };
      },
    },
  });
}

/**
 * The tools, each execution of which is a step "tool-<toolCallId>": a tool
 * call's id comes from the model's (stored) answer, so a replay finds it.
 * @template {Record<string, any>} T
 * @param {import('jetrun').Run} run
 * @param {T} tools
 * @returns {T}
 */
export function durableTools(run, tools) {
  const out = {};
  for (const [name, t] of Object.entries(tools)) {
    out[name] = t.execute
      ? { ...t, execute: (input, options) => run.step(stepName('tool', options.toolCallId), () => t.execute(input, options)) }
      : t;
  }
  return out;
}
