#!/usr/bin/env python3
"""A jetrun child in Python, served through the http agent type, on the
jetrun library (sdk/python). Standard library only. Run it, then point a
worker at it:

    python3 examples/python/researcher.py --port 9000
    JETRUN_HTTP_AGENTS=research-py=http://127.0.0.1:9000/run ./bin/parent-worker

For each run the worker POSTs {"runId", "attempt", "input", "milestones", ...}
and reads the answer as newline-delimited JSON events (docs/protocol.md,
"Write a child in another language"). This child researches input.topic in
input.steps steps (each a chunk, a progress report and a milestone), resumes
after the milestones a previous attempt reached, and, with input.approval,
waits for the signal "approve" before it returns its result: run.wait ends
the response, and the worker answers the wait with a second POST carrying
the signal, which runs the handler again from the top (the milestones say
what is done).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import jetrun  # noqa: E402


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def handle(run):
    try:
        research(run)
    except jetrun.Stopped:
        # The worker closed the connection: the run was cancelled, taken
        # over or its worker stopped. Stop working on it.
        log("run %s: the worker hung up; stopping" % run.run_id)
        raise


def research(run):
    inp = run.input
    if not isinstance(inp, dict) or not isinstance(inp.get("topic", ""), str):
        run.fail('input must be {"topic": "...", "steps": n}')
        return
    topic = inp.get("topic", "tides")
    steps = int(inp.get("steps", 5))
    delay = float(inp.get("stepDelay", 0.2))
    # Steps this attempt ran in an earlier POST of the run (the one that
    # waited for the signal): their milestones carry this attempt.
    ran = sum(1 for m in run.milestones if m["name"].startswith("step-")
              and (m.get("data") or {}).get("attempt") == run.attempt)
    signal = run.request.get("signal")
    if signal:
        log("run %s: got signal %s" % (run.run_id, signal["name"]))

    started = False
    for i in range(1, steps + 1):
        if run.reached("step-%d" % i):
            continue  # done already
        if not started:
            started = True
            log("run %s attempt %d: starting at step %d" % (run.run_id, run.attempt, i))
        time.sleep(delay)
        run.chunk("step %d: read about %s\n" % (i, topic))
        run.progress(i / steps, "researching", "step %d of %d" % (i, steps))
        run.milestone("step-%d" % i, {"step": i, "attempt": run.attempt})
        ran += 1

    approval = None
    if inp.get("approval") and not run.reached("approved"):
        if not signal:
            run.progress(1, "waiting for approval", 'send the "approve" signal')
        approval = run.wait("approve")  # without the signal, the response ends here
        run.milestone("approved", approval)

    run.result("researched %s in %d steps" % (topic, steps),
               {"topic": topic, "steps": steps, "stepsRunHere": ran, "attempt": run.attempt, "approval": approval})
    log("run %s: completed" % run.run_id)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000, help="0 picks a free port")
    args = ap.parse_args()
    server = jetrun.http_server(handle, args.host, args.port)
    host, port = server.server_address[:2]
    print("listening on http://%s:%d/run" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
