#!/usr/bin/env python3
"""Re-runs a run from a step and compares the two through jetrun.Client,
against a real parent-worker, printing one JSON line per verb; checked by
TestPythonCallerReruns (internal/testkit/e2e).

    PYTHONPATH=sdk/python python3 live_rerun.py URL LEDGER_1 LEDGER_2
"""

import json
import sys

import jetrun


def say(what, **fields):
    print(json.dumps(dict(fields, what=what)), flush=True)


def main():
    c = jetrun.Client(sys.argv[1])
    first, again = sys.argv[2], sys.argv[3]

    # rerun: a four-turn agent re-run from its third turn makes turns 3 and 4 only.
    c.run("agent-py", {"question": "tides", "turns": 4, "delay": 0.01, "ledger": first}, run_id="py-orig")
    fork = c.rerun("py-orig", "think-3", input={"question": "tides", "turns": 4, "delay": 0.01, "ledger": again},
                   new_run_id="py-fork")
    done = c.await_run("py-fork")
    diff = c.diff("py-orig", "py-fork")
    say("rerun", id=fork["id"], forkedFrom=fork.get("forkedFrom"), status=done["status"], summary=done["summary"],
        diff=[[s["name"], s["verdict"]] for s in diff["steps"]])
    try:
        c.rerun("py-orig", "think-99")
        say("rerun-bad", status=None)
    except jetrun.APIError as e:
        say("rerun-bad", status=e.status, code=e.code)


if __name__ == "__main__":
    main()
