// Sub-agents from a TypeScript child against a real parent-worker and
// child-workers: task_<agent> runs the delegate as a nested run of the
// caller with the objective and context; create_and_run_agent runs a spec
// as a child of the generic agent type; what the model can fix comes back
// as text; a dynamic agent cannot create dynamic agents; a delegate with
// its name and description overridden is a persistent sub-agent whose
// second turn sees the first as its history; the caller's
// variables go down in each child's input, and one a child sets comes back
// to the caller, stored as the Go worker names a variable step.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Jetrun, here, node } from './harness.mjs';
import { Client, childRunId } from '../index.js';

let j;
let client;

before(async () => {
  j = await Jetrun.start();
  client = new Client({ url: j.url });
  await j.worker({
    'js-agent': `${node} ${join(here, 'children', 'agent.mjs')}`,
    'js-memo': `${node} ${join(here, 'children', 'memo.mjs')}`,
    'js-orchestrator': `${node} ${join(here, 'children', 'orchestrator.mjs')} ${j.url}`,
  });
});
after(async () => { await j?.close(); });

test('delegate and dynamic tools run nested runs; mistakes are answered as text', async () => {
  const calls = [
    { id: 'c1', tool: 'task_js-agent', args: { objective: 'think', context: 'twice', turns: 9 } },
    { id: 'c2', tool: 'task_js-agent', args: { context: 'no objective' } },
    { id: 'c3', tool: 'task_nobody', args: { objective: 'x' } },
    { id: 'c4', tool: 'create_and_run_agent', args: JSON.stringify({ spec: { name: 'scout', prompt: 'find', tools: ['search'] }, objective: 'map' }) },
    { id: 'c5', tool: 'create_and_run_agent', args: { spec: { name: 'scout', prompt: 'find', tools: ['teleport'] }, objective: 'map' } },
    { id: 'c6', tool: 'ask_memo', args: { objective: 'remember 7' } },
    { id: 'c7', tool: 'ask_memo', args: { objective: 'what was it', context: 'the number' } },
  ];
  const out = await client.run('js-orchestrator', { calls }, { runId: 'js-orch' });
  const { tools, descriptions, answers, variables, variableSteps } = out.output;
  assert.deepEqual(variables, { topic: 'tides', found: 'map' });
  assert.deepEqual(variableSteps, ['variables.1.1', 'variables.1.2']);
  assert.deepEqual(tools, ['task_js-agent(objective)', 'ask_memo(objective)', 'create_and_run_agent(spec,objective)']);
  assert.equal(descriptions.ask_memo, 'Remembers what it was told.');
  assert.equal(descriptions['task_js-agent'], 'Thinks in words.');
  assert.deepEqual(JSON.parse(answers[0]).words, ['w1', 'w2', 'w3']);
  assert.equal(answers[1], 'error: task_js-agent: objective is required');
  assert.equal(answers[2], 'error: unknown tool "task_nobody": use one of [task_js-agent, ask_memo, create_and_run_agent]');
  assert.deepEqual(JSON.parse(answers[3]), {
    dynamic: 'scout', objective: 'map', tools: ['task_js-agent(objective)', 'ask_memo(objective)'], nested: 'error: a dynamic agent cannot create dynamic agents', seen: { topic: 'tides' },
  });
  assert.equal(answers[4], 'error: create_and_run_agent: unknown tool "teleport": choose from the pool [search, fetch]');
  // The persistent sub-agent: its second turn sees the first as history.
  assert.deepEqual(JSON.parse(answers[5]), { session: 'js-notes', heard: [], attempt: 1 });
  assert.deepEqual(JSON.parse(answers[6]), { session: 'js-notes', heard: ['remember 7'], attempt: 1 });
  const memo = await client.get(childRunId('js-orch', 'c7'));
  assert.deepEqual([memo.parent, memo.agentType, memo.session], ['js-orch', 'js-memo', 'js-notes']);
  assert.deepEqual(memo.input, { objective: 'what was it', context: 'the number', variables: { topic: 'tides', found: 'map' } });

  const kid = await client.get(childRunId('js-orch', 'c1'));
  assert.equal(kid.parent, 'js-orch');
  assert.equal(kid.agentType, 'js-agent');
  assert.deepEqual(kid.input, { objective: 'think', context: 'twice', variables: { topic: 'tides' } });
  const dyn = await client.get(childRunId('js-orch', 'c4'));
  assert.equal(dyn.agentType, 'js-orchestrator');
  assert.deepEqual(dyn.input.spec, { name: 'scout', prompt: 'find', tools: ['search'] });
});
