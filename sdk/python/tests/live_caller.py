#!/usr/bin/env python3
"""Drives a real parent-worker's HTTP API through jetrun.Client and prints,
one JSON line each, what it saw; internal/testkit/e2e (TestPythonCaller)
starts the parent-worker, runs this and checks each line against what
jetrun stored. Not a unittest module: it needs the server.

    PYTHONPATH=sdk/python python3 sdk/python/tests/live_caller.py http://127.0.0.1:8080

The parent-worker serves agent-py (examples/python/agent.py), wordcount
(examples/python/wordcount.py), py-child (live_child.py) and demo.
"""

import json
import sys
import time

import jetrun


def say(what, **fields):
    print(json.dumps(dict(fields, what=what)), flush=True)


def until(cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def main():
    c = jetrun.Client(sys.argv[1])

    # dispatch, the same id again, stream with a resume, await.
    row = c.dispatch("agent-py", {"question": "tides", "turns": 3, "delay": 0.05}, run_id="py-c-steps")
    again = c.dispatch("agent-py", {"question": "tides", "turns": 3, "delay": 0.05}, run_id="py-c-steps")
    say("dispatched", id=row["id"], status=row["status"], againId=again["id"])
    seen = []
    for ev in c.stream("py-c-steps"):
        seen.append(ev)
        if sum(1 for e in seen if e.id) == 3:
            break  # hang up after three events ...
    first = [e.id for e in seen if e.id]
    for ev in c.stream("py-c-steps", last_event_id=first[-1]):  # ... and resume after the last one
        seen.append(ev)
    say("streamed", ids=[e.id for e in seen if e.id], kinds=[e.kind for e in seen], firstPart=len(first),
        steps=[e.data["data"]["name"] for e in seen if e.kind == "step"])
    done = c.await_run("py-c-steps")
    say("awaited", id=done["id"], status=done["status"], summary=done["summary"])

    # run: dispatch and wait in one call.
    out = c.run("wordcount", {"text": "the quick brown\nfox jumps"}, run_id="py-c-run")
    say("ran", id=out["runId"], status=out["status"], summary=out["summary"], output=out["output"])

    # a wait answered with a signal.
    c.dispatch("demo", {"steps": 3, "stepMs": 20, "approveAt": 2}, run_id="py-c-wait")
    until(lambda: c.get("py-c-wait").get("waitingFor") == "approve", "py-c-wait to wait for approve")
    c.signal("py-c-wait", "approve", {"approved": True})
    done = c.await_run("py-c-wait")
    say("signalled", id=done["id"], status=done["status"], summary=done["summary"])

    # cancel: await raises RunFailed.
    c.dispatch("demo", {"steps": 100000, "stepMs": 100}, run_id="py-c-cancel")
    until(lambda: c.get("py-c-cancel")["status"] == "running", "py-c-cancel to run")
    cancelled = c.cancel("py-c-cancel", "enough")
    try:
        c.await_run("py-c-cancel")
        say("cancelled", id="py-c-cancel", raised=False)
    except jetrun.RunFailed as e:
        say("cancelled", id="py-c-cancel", raised=True, status=e.status, error=e.run.get("error"),
            cancelRequested=cancelled.get("cancelRequested"))

    # a child's failure: await raises RunFailed with its error.
    c.dispatch("wordcount", {"words": 3}, run_id="py-c-fail")
    try:
        c.await_run("py-c-fail")
        say("failed", id="py-c-fail", raised=False)
    except jetrun.RunFailed as e:
        say("failed", id="py-c-fail", raised=True, status=e.status, error=e.run.get("error"), retryable=e.retryable)

    # a Python child (live_child.py) that fails retryable once, then calls
    # its caller twice: reply answers the first, and fails the second.
    c.dispatch("py-child", {"question": "colour?", "flaky": True}, run_id="py-c-calls")
    for seq, answer in ((1, {"output": "blue"}), (2, {"error": "no idea"})):
        until(lambda: any(x["seq"] == seq and x["state"] == "pending" for x in c.calls("py-c-calls")),
              "py-c-calls to make call %d" % seq)
        c.reply("py-c-calls", seq, **answer)
    done = c.await_run("py-c-calls")
    say("called", id=done["id"], status=done["status"], summary=done["summary"], output=done["output"],
        attempt=done["attempt"], calls=[[x["seq"], x["state"], x["input"]] for x in c.calls("py-c-calls")])

    # a Python child's failure that is not retryable (run.fail): one attempt.
    c.dispatch("py-child", {"refuse": True}, run_id="py-c-refuse")
    try:
        c.await_run("py-c-refuse")
        say("refused", id="py-c-refuse", raised=False)
    except jetrun.RunFailed as e:
        say("refused", id="py-c-refuse", raised=True, status=e.status, error=e.run.get("error"),
            attempt=e.run.get("attempt"), retryable=e.retryable)

    # the API's errors.
    try:
        c.get("py-c-nonesuch")
    except jetrun.APIError as e:
        say("missing", status=e.status, code=e.code)


if __name__ == "__main__":
    main()
