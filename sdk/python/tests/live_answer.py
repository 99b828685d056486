#!/usr/bin/env python3
"""Answers an ask through jetrun.Client against a real parent-worker: a
Python child (live_child.py) waits for "approve", which makes an ask; the
caller finds it in the inbox, answers it with its digest, and a second
answer is refused. Prints one JSON line; checked by
TestPythonCallerAnswersAnAsk (internal/testkit/e2e).

    PYTHONPATH=sdk/python python3 live_answer.py URL
"""

import json
import sys
import time

import jetrun


def say(what, **fields):
    print(json.dumps(dict(fields, what=what)), flush=True)


def until(cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def main():
    c = jetrun.Client(sys.argv[1])

    # answer: the run's wait for "approve" is an ask; the first answer wins.
    c.dispatch("py-child", {"approval": True}, run_id="py-ask")
    ask = until(lambda: next(iter(c.asks(runId="py-ask")), None), "py-ask's ask")
    answered = c.answer(ask["id"], {"approved": True}, ask["digest"], by="py-test")
    try:
        c.answer(ask["id"], {"approved": False}, ask["digest"])
        second = None
    except jetrun.APIError as e:
        second = e.status
    done = c.await_run("py-ask")
    say("answered", askId=ask["id"], status=answered["status"], by=answered["answer"]["by"],
        value=answered["answer"]["value"], second=second, run=done["status"], summary=done["summary"],
        output=done["output"], kind=ask["kind"], payloadRun=ask["runId"])


if __name__ == "__main__":
    main()
