// A Vercel AI SDK agent (`ai`'s streamText, or generateText with {"generate": true}, with tools) made durable by jetrun,
// run by the exec agent type:
//
//   JETRUN_EXEC_AGENTS="weather=node examples/js/ai-sdk/agent.mjs" make run
//   jetrun dispatch --wait weather '{"prompt":"Compare the weather in Paris and Oslo"}'
//
// Each model call and each tool call is a jetrun step (durable.mjs): kill
// the worker mid-loop and the next attempt resumes after the last stored
// call. The tokens stream to the run as chunks; the SDK's usage is the run's.
// With --mock the model is the AI SDK's MockLanguageModelV3 playing a script
// (mock.mjs, no network); without it, the AI Gateway model named by
// AI_MODEL (default openai/gpt-5-mini; AI_GATEWAY_API_KEY in the environment).

import { gateway, generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';
import { child } from 'jetrun';
import { durableModel, durableTools } from './durable.mjs';

const mock = process.argv.includes('--mock') ? await import('./mock.mjs') : null;

const TABLE = { paris: 'sunny, 21°C', oslo: 'snow, -3°C' };

await child(async (run) => {
  const lookup = mock ? mock.weatherService(run) : async (city) => TABLE[city.toLowerCase()] ?? 'unknown';
  const weather = tool({
    description: 'The current weather in a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, weather: await lookup(city) }),
  });
  const model = durableModel(run, mock ? mock.scriptedModel(run) : gateway(process.env.AI_MODEL ?? 'openai/gpt-5-mini'));
  const call = { model, tools: durableTools(run, { weather }), stopWhen: stepCountIs(6), prompt: run.input.prompt };
  if (run.input.generate) { // generateText: the same loop, each model call answered whole
    const result = await generateText(call);
    return {
      summary: result.text,
      output: { text: result.text, calls: result.steps.length, inputTokens: result.totalUsage.inputTokens, outputTokens: result.totalUsage.outputTokens },
    };
  }
  const result = streamText(call);
  const text = await result.text;
  const usage = await result.totalUsage;
  return {
    summary: text,
    output: { text, calls: (await result.steps).length, inputTokens: usage.inputTokens, outputTokens: usage.outputTokens },
  };
});
