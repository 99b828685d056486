#!/usr/bin/env python3
"""A jetrun agent loop in Python with durable steps, run through the exec
agent type.

    JETRUN_EXEC_AGENTS="agent-py=python3 $PWD/examples/python/agent.py" ./bin/child-worker

Each turn of the loop is a (simulated, slow, paid) model call wrapped in a
step: the child prints {"step": {"name": "think-<n>", "output": ...,
"usage": {...}}} once the call returns, and the worker stores it (with what
the call spent, counted on the run once) before it acts on any later line.
When the run is executed again (its worker was killed, a retry), the request
carries every stored step in "steps", and step() returns the stored output
instead of paying for the call again. A call that was running when the
worker died is made again: at most twice.

Input: {"question": "...", "turns": n, "delay": seconds, "ledger": "path",
"usageLines": false}; with "ledger", every model call actually made appends
a line "<step> <attempt>" to that file, so you can check none is paid twice.
With "usageLines", a call's usage goes on a usage line of its own right
before the step line instead of inside it: the worker takes it as the
step's all the same.
"""

import json
import sys
import time


def event(ev):
    print("@jetrun " + json.dumps(ev), flush=True)


class Run:
    def __init__(self, req, usage_lines=False):
        self.req = req
        self.steps = dict(req.get("steps") or {})  # name -> output, stored by earlier attempts
        self.usage_lines = usage_lines

    def step(self, name, work):
        """Returns the stored output of step name, or runs work() and stores
        what it returns: (output, usage), any JSON value and what the work
        spent (the fields of a usage line, or None)."""
        if name in self.steps:
            return self.steps[name]
        output, usage = work()
        line = {"name": name, "output": output}
        if usage and self.usage_lines:
            event({"usage": usage})  # right before the step line: the step's
        elif usage:
            line["usage"] = usage  # counted on the run once, stored with the step
        event({"step": line})
        self.steps[name] = output
        return output


def main():
    req = json.loads(sys.stdin.readline())  # not sys.stdin.read(): stdin stays open for signals
    inp = req.get("input") or {}
    run = Run(req, bool(inp.get("usageLines")))
    question = inp.get("question", "why do tides happen?")
    turns = int(inp.get("turns", 3))
    delay = float(inp.get("delay", 0.2))
    ledger = inp.get("ledger")

    def model_call(name, prompt):
        time.sleep(delay)  # a slow, paid call
        if ledger:
            with open(ledger, "a") as f:
                f.write("%s %d\n" % (name, req["attempt"]))
        thought = {"thought": "about %r, given %d earlier thoughts" % (question, len(prompt))}
        spent = {"inputTokens": 40 + 30 * len(prompt), "outputTokens": 12, "model": "sim-1"}
        return thought, spent

    thoughts = []
    for n in range(1, turns + 1):
        name = "think-%d" % n
        thought = run.step(name, lambda: model_call(name, thoughts))
        thoughts.append(thought)
        print("turn %d: %s" % (n, thought["thought"]), flush=True)
        event({"progress": {"fraction": n / turns, "phase": "thinking"}})
    event({"result": {"summary": "answered in %d turns" % turns,
                      "output": {"turns": turns, "attempt": req["attempt"]}}})


if __name__ == "__main__":
    main()
