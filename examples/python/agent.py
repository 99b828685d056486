#!/usr/bin/env python3
"""A jetrun agent loop in Python with durable steps, run through the exec
agent type, on the jetrun library (sdk/python).

    JETRUN_EXEC_AGENTS="agent-py=python3 $PWD/examples/python/agent.py" ./bin/child-worker

Each turn of the loop is a (simulated, slow, paid) model call wrapped in
run.step: the library prints the step line once the call returns, with what
the call spent, and the worker stores it (the usage counted on the run once)
before it acts on any later line. When the run is executed again (its worker
was killed, a retry), the request carries every stored step, and run.step
returns the stored output instead of paying for the call again. A call that
was running when the worker died is made again: at most twice.

Input: {"question": "...", "turns": n, "delay": seconds, "ledger": "path",
"usageLines": false}; with "ledger", every model call actually made appends
a line "<step> <attempt>" to that file, so you can check none is paid twice.
With "usageLines", a call reports its input and its output tokens apart, so
the library writes them on the step line as an array of two reports: the
worker takes them as the step's all the same.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import jetrun  # noqa: E402


def handle(run):
    inp = run.input or {}
    question = inp.get("question", "why do tides happen?")
    turns = int(inp.get("turns", 3))
    delay = float(inp.get("delay", 0.2))
    ledger = inp.get("ledger")
    usage_lines = bool(inp.get("usageLines"))

    def model_call(name, prompt):
        time.sleep(delay)  # a slow, paid call
        if ledger:
            with open(ledger, "a") as f:
                f.write("%s %d\n" % (name, run.attempt))
        spent_in, spent_out = 40 + 30 * len(prompt), 12
        if usage_lines:
            run.usage(input_tokens=spent_in, model="sim-1")
            run.usage(output_tokens=spent_out, model="sim-1")
        else:
            run.usage(input_tokens=spent_in, output_tokens=spent_out, model="sim-1")
        return {"thought": "about %r, given %d earlier thoughts" % (question, len(prompt))}

    thoughts = []
    for n in range(1, turns + 1):
        name = "think-%d" % n
        thought = run.step(name, lambda: model_call(name, thoughts))
        thoughts.append(thought)
        run.print("turn %d: %s" % (n, thought["thought"]))
        run.progress(n / turns, "thinking")
    return jetrun.Result("answered in %d turns" % turns, {"turns": turns, "attempt": run.attempt})


if __name__ == "__main__":
    jetrun.serve(handle)
