#!/usr/bin/env python3
"""A jetrun child in Python that pays for model calls, run through the exec
agent type.

    JETRUN_EXEC_AGENTS="spender=python3 $PWD/examples/python/spender.py" ./bin/child-worker

Input: {"calls": n, "delay": seconds}. Each call stands for one model call:
it reports what the call cost with a usage event, then marks a milestone
call-<i>, so an attempt that takes the run over after a crash starts after
the last call an earlier attempt finished. Usage adds up on the run's row
(and its tree's); in a tree with a budget the run is stopped once the
budget is spent (docs/protocol.md, "Usage and budgets").
"""

import json
import sys
import time


def event(ev):
    print("@jetrun " + json.dumps(ev), flush=True)


def main():
    req = json.loads(sys.stdin.readline())  # not sys.stdin.read(): stdin stays open for signals
    inp = req.get("input") or {}
    calls, delay = int(inp.get("calls", 3)), float(inp.get("delay", 0))
    done = len(req.get("milestones") or [])  # calls an earlier attempt finished
    for i in range(done + 1, calls + 1):
        time.sleep(delay)  # the model call
        event({"usage": {"inputTokens": 100, "outputTokens": 20, "costMicros": 150, "model": "toy-model"}})
        event({"milestone": {"name": "call-%d" % i}})
    event({"result": {"summary": "%d calls, %d here" % (calls, calls - done),
                      "output": {"calls": calls, "callsHere": calls - done, "attempt": req["attempt"]}}})


if __name__ == "__main__":
    main()
