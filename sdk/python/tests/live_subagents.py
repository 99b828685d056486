"""A scripted model's loop over sub-agents, run by a real worker (the Go
test TestPythonSubAgents): it lists its sub-agents' tools and makes the tool
calls its input names with run_sub_agent, answering what each returned and
its variables: it sets "topic", which goes down to each child; the dynamic
agent sets "found", which comes back to it.
The delegate is memo (examples/python/memo.py) as a persistent sub-agent;
the generic agent type of dynamic agents is py-orchestrator itself. Its
argument is the HTTP API's URL."""

import sys

import jetrun

SUBS = jetrun.SubAgents([jetrun.Delegate("memo", name="ask_memo", description="Remembers what it was told.",
                                         session="py-notes")],
                        dynamic_type="py-orchestrator", pool=["search", "fetch"])


def handle(run):
    client = jetrun.Client(sys.argv[1])
    defs = jetrun.sub_agent_tools(run, SUBS)
    tools = ["%s(%s)" % (t["function"]["name"], ",".join(t["function"]["parameters"]["required"])) for t in defs]
    if run.input.get("spec"):
        nested = jetrun.run_sub_agent(run, SUBS, client, "nested", jetrun.DYNAMIC_TOOL,
                                      {"spec": {"name": "g", "prompt": "p"}, "objective": "o"})
        seen = run.variables()
        run.set_variable("found", run.input["objective"])
        return {"dynamic": run.input["spec"]["name"], "objective": run.input["objective"], "tools": tools, "nested": nested,
                "seen": seen}
    run.set_variable("topic", "tides")
    answers = [jetrun.run_sub_agent(run, SUBS, client, c["id"], c["tool"], c["args"]) for c in run.input["calls"]]
    return {"tools": tools, "descriptions": {t["function"]["name"]: t["function"]["description"] for t in defs},
            "answers": answers, "variables": run.variables(),
            "variableSteps": sorted(n for n in run.steps if n.startswith("variables."))}


jetrun.serve(handle)
