// A scripted model's loop over sub-agents: it lists the tools of its
// sub-agents and makes the tool calls its input names with runSubAgent,
// answering what each returned and its variables: it sets "topic", which
// goes down to each child; the dynamic agent sets "found", which comes
// back to it. The delegates are js-agent and js-memo (renamed ask_memo, a
// persistent sub-agent under the session js-notes); the generic
// agent type of dynamic agents is js-orchestrator itself. Its argument is
// the HTTP API's URL.
import { child, Client, subAgentTools, runSubAgent } from '../../index.js';

await child(async (run) => {
  const subs = {
    delegates: [
      { agentType: 'js-agent', description: 'Thinks in words.' },
      { agentType: 'js-memo', name: 'ask_memo', description: 'Remembers what it was told.', session: 'js-notes' },
    ],
    dynamicType: 'js-orchestrator', pool: ['search', 'fetch'], client: new Client({ url: process.argv[2] }),
  };
  const defs = subAgentTools(run, subs);
  const tools = defs.map((t) => `${t.function.name}(${t.function.parameters.required.join(',')})`);
  const descriptions = Object.fromEntries(defs.map((t) => [t.function.name, t.function.description]));
  if (run.input.spec) {
    const nested = await runSubAgent(run, subs, 'nested', 'create_and_run_agent', { spec: { name: 'g', prompt: 'p' }, objective: 'o' });
    const seen = run.variables();
    await run.setVariable('found', run.input.objective);
    return { output: { dynamic: run.input.spec.name, objective: run.input.objective, tools, nested, seen } };
  }
  await run.setVariable('topic', 'tides');
  const answers = [];
  for (const c of run.input.calls ?? []) answers.push(await runSubAgent(run, subs, c.id, c.tool, c.args));
  const variableSteps = Object.keys(run.steps).filter((n) => n.startsWith('variables.')).sort();
  return { output: { tools, descriptions, answers, variables: run.variables(), variableSteps } };
});
