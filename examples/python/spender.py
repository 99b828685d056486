#!/usr/bin/env python3
"""A jetrun child in Python that pays for model calls, run through the exec
agent type, on the jetrun library (sdk/python).

    JETRUN_EXEC_AGENTS="spender=python3 $PWD/examples/python/spender.py" ./bin/child-worker

Input: {"calls": n, "delay": seconds}. Each call stands for one model call:
it reports what the call cost (run.usage), then marks a milestone call-<i>,
so an attempt that takes the run over after a crash starts after the last
call an earlier attempt finished. Usage adds up on the run's row (and its
tree's); in a tree with a budget the run is stopped once the budget is
spent (docs/protocol.md, "Usage and budgets").
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import jetrun  # noqa: E402


def handle(run):
    inp = run.input or {}
    calls, delay = int(inp.get("calls", 3)), float(inp.get("delay", 0))
    done = len(run.milestones)  # calls an earlier attempt finished
    for i in range(done + 1, calls + 1):
        time.sleep(delay)  # the model call
        run.usage(input_tokens=100, output_tokens=20, cost_micros=150, model="toy-model")
        run.milestone("call-%d" % i)
    return jetrun.Result("%d calls, %d here" % (calls, calls - done),
                         {"calls": calls, "callsHere": calls - done, "attempt": run.attempt})


if __name__ == "__main__":
    jetrun.serve(handle)
