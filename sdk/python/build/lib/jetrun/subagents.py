"""Sub-agents (docs/protocol.md, "Sub-agents"), the way AG2 names them:
task_<agent> delegate tools with an objective and an optional context, and
create_and_run_agent, which runs an agent made from a spec as a child of a
generic agent type. The tools' shapes and the answers a model reads are
those of the Go worker's Run.SubAgentTools and Run.RunSubAgent; a call is a
nested run of the calling run, dispatched and awaited through a Client.

    subs = SubAgents([Delegate("researcher")], dynamic_type="generic", pool=["search"])
    tools = sub_agent_tools(run, subs)              # OpenAI-format definitions
    text = run_sub_agent(run, subs, client, call.id, call.name, call.arguments)
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Dict, List, Optional, Sequence

from .child import Run, variable_changes
from .client import Client, RunFailed

DYNAMIC_TOOL = "create_and_run_agent"
"""The name of the tool that creates and runs a dynamic agent."""


class Delegate:
    """An agent type offered as the tool task_<agent_type>; name and
    description override the tool's; session makes it persistent (its runs
    are turns of that session)."""

    def __init__(self, agent_type: str, name: Optional[str] = None, description: Optional[str] = None,
                 session: Optional[str] = None) -> None:
        self.agent_type = agent_type
        self.name = name or "task_" + agent_type
        self.description = description or (
            "Delegate a task to the %s agent: give it an objective and, optionally, context." % agent_type)
        self.session = session


class SubAgents:
    """The sub-agents a run offers its model: delegates, the generic agent
    type of dynamic agents (None: no create_and_run_agent) and the pool of
    tools a dynamic agent's spec may pick."""

    def __init__(self, delegates: Sequence[Delegate] = (), dynamic_type: Optional[str] = None,
                 pool: Sequence[str] = ()) -> None:
        self.delegates = list(delegates)
        self.dynamic_type = dynamic_type
        self.pool = list(pool)


def child_run_id(parent: str, call_id: str) -> str:
    """The id jetrun gives the nested run parent starts for call_id (Go:
    parent.RunID): "tc-" and the lowercase base32hex of the first 20 bytes
    of SHA-256(parent NUL call_id)."""
    digest = hashlib.sha256((parent + "\x00" + call_id).encode()).digest()[:20]
    return "tc-" + base64.b32encode(digest).decode().translate(_TO_BASE32HEX).lower()


# base64.b32hexencode is Python 3.10's; base32hex is base32 with another
# alphabet (RFC 4648), and 20 bytes need no padding.
_TO_BASE32HEX = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789ABCDEFGHIJKLMNOPQRSTUV")


def _is_dynamic(input: Any) -> bool:
    return isinstance(input, dict) and input.get("spec") is not None


def _task_parameters() -> Dict[str, Any]:
    return {"type": "object", "properties": {
        "objective": {"type": "string", "description": "What the sub-agent must achieve."},
        "context": {"type": "string", "description": "What the sub-agent needs to know that the objective does not say."}},
        "required": ["objective"], "additionalProperties": False}


def sub_agent_tools(run: Run, subs: SubAgents) -> List[Dict[str, Any]]:
    """The OpenAI-format tool definitions of subs: task_<agent> per
    delegate, and create_and_run_agent unless run is a dynamic agent."""
    tools = [{"type": "function", "function": {"name": d.name, "description": d.description,
                                               "parameters": _task_parameters()}} for d in subs.delegates]
    if subs.dynamic_type and not _is_dynamic(run.input):
        tools.append({"type": "function", "function": {
            "name": DYNAMIC_TOOL,
            "description": "Create an agent from a spec (a name, a prompt, tools from the pool, an optional "
                           "response schema) and run it on an objective; returns its answer.",
            "parameters": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "prompt": {"type": "string", "description": "The agent's system prompt."},
                    "tools": {"type": "array", "items": {"type": "string", "enum": list(subs.pool)},
                              "description": "Tools the agent may use, from the pool."},
                    "responseSchema": {"type": "object", "description": "Optional JSON Schema of the agent's answer."}},
                    "required": ["name", "prompt"]},
                "objective": {"type": "string"}, "context": {"type": "string"}},
                "required": ["spec", "objective"], "additionalProperties": False}}})
    return tools


def _take_variables(run: Run, client: Client, child: str) -> None:
    """Makes the variables the completed child changed (its variable steps,
    in the order stored) run's, those that differ from its own."""
    steps = []
    for ev in client.stream(child, follow=False):  # each event's data: {"seq", "kind", "data": <the step>, ...}
        st = ev.data.get("data") if ev.kind == "step" and isinstance(ev.data, dict) else None
        if isinstance(st, dict) and not st.get("error"):
            steps.append((str(st.get("name", "")), st.get("output")))
    changed, keys = variable_changes(steps)
    mine = run.variables()
    for k in keys:
        if k in mine and mine[k] == changed[k]:
            continue
        run.set_variable(k, changed[k])


def run_sub_agent(run: Run, subs: SubAgents, client: Client, call_id: str, name: str, args: Any) -> str:
    """Runs the model's tool call (call_id, name, args: a dict or its JSON)
    as a nested run of run and returns the text the model reads: the
    child's output (a string as is, else its JSON), or its summary. What the
    model can fix (an unknown tool, no objective, a spec tool outside the
    pool, a failed child) is answered as a text starting "error:". The
    child's input carries run's variables; the ones a completed child
    changed become run's (Run.variables)."""
    a = json.loads(args) if isinstance(args, str) else dict(args or {})
    inp: Dict[str, Any] = {"objective": a.get("objective")}
    if a.get("context"):
        inp["context"] = a["context"]
    session = None
    if name == DYNAMIC_TOOL and subs.dynamic_type:
        if _is_dynamic(run.input):
            return "error: a dynamic agent cannot create dynamic agents"
        spec = a.get("spec")
        problems = []
        if not a.get("objective"):
            problems.append("objective is required")
        if not isinstance(spec, dict):
            problems.append("spec is required")
        else:
            problems += ["spec.%s is required" % k for k in ("name", "prompt") if not spec.get(k)]
            problems += ["unknown tool %s: choose from the pool [%s]" % (json.dumps(t), ", ".join(subs.pool))
                         for t in spec.get("tools") or [] if t not in subs.pool]
        if problems:
            return "error: %s: %s" % (name, "\n".join(problems))
        agent_type = subs.dynamic_type
        inp["spec"] = spec
    else:
        d = next((d for d in subs.delegates if d.name == name), None)
        if d is None:
            names = [d.name for d in subs.delegates]
            if subs.dynamic_type and not _is_dynamic(run.input):
                names.append(DYNAMIC_TOOL)
            return "error: unknown tool %s: use one of [%s]" % (json.dumps(name), ", ".join(names))
        if not isinstance(a.get("objective"), str) or not a["objective"]:
            return "error: %s: objective is required" % name
        agent_type, session = d.agent_type, d.session
    vars = run.variables()
    if vars:
        inp["variables"] = vars
    fields: Dict[str, Any] = {"parent": run.run_id, "parentToolCallId": call_id, "depth": run.depth + 1}
    if session:
        fields["session"] = session
    child = child_run_id(run.run_id, call_id)
    try:
        out = client.run(agent_type, inp, run_id=child, **fields)
    except RunFailed as f:
        return "error: sub-agent %s ended %s: %s" % (agent_type, f.status, f.run.get("error", ""))
    _take_variables(run, client, child)
    output = out.get("output")
    if output is not None:
        return output if isinstance(output, str) else json.dumps(output)
    return str(out.get("summary") or "")
