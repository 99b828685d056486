#!/usr/bin/env python3
"""A persistent sub-agent in Python (docs/protocol.md, "Sub-agents"): run
under a session key, each turn sees the session's earlier turns in the
request's "history", with their input, output and steps.

    JETRUN_EXEC_AGENTS="memo=python3 $PWD/examples/python/memo.py" ./bin/child-worker
    ./bin/jetrun dispatch --wait --session notes memo '{"objective": "remember 7"}'

Input: {"objective": "...", "gate": "<path>"?}. It stores the step "heard"
(what it was asked), waits for the file gate when one is named (a test
kills its worker there), and answers with what the session heard before.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import jetrun  # noqa: E402


def handle(run):
    objective = (run.input or {}).get("objective", "")
    run.step("heard", lambda: objective)
    gate = (run.input or {}).get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    heard = [next((s["output"] for s in t.get("steps") or [] if s["name"] == "heard"), None) for t in run.history]
    return jetrun.Result("heard %d before" % len(heard), {"session": run.session, "heard": heard, "attempt": run.attempt})


jetrun.serve(handle)
