#!/usr/bin/env python3
"""An exec child on the library for the live tests (TestPythonCaller):
a step with its usage, a chunk, progress, a retryable failure on the first
attempt with "flaky", then two calls to its caller (one answered, one
failed) and a milestone. With "refuse" it fails, not retryable. With "approval" it only waits for the signal
"approve" (an ask, TestPythonCallerAnswersAnAsk) and returns its payload.

    JETRUN_EXEC_AGENTS="py-child=python3 sdk/python/tests/live_child.py" (PYTHONPATH=sdk/python)
"""

from typing import Optional

import jetrun


def handle(run: jetrun.Run) -> Optional[jetrun.Result]:
    inp = run.input
    if inp.get("refuse"):
        run.fail("no question given", retryable=False)
        return None
    if inp.get("approval"):
        decision = run.wait("approve")
        return jetrun.Result("approved" if decision.get("approved") else "rejected", decision)

    def plan():
        run.usage(input_tokens=10, output_tokens=2, model="m")
        return {"question": inp["question"]}

    asked = run.step("plan", plan)
    run.chunk("planned\n")
    run.progress(0.5, "asking")
    if inp.get("flaky") and run.attempt == 1:
        raise jetrun.RetryableError("flaky on purpose", retry_after_ms=10)
    answer = run.call("ask-user", asked)
    run.milestone("answered", {"answer": answer})
    try:
        second = run.call("ask-user", {"question": "and then?"})
    except jetrun.CallError as e:
        second = "error: " + e.message
    return jetrun.Result("answer: %s" % answer, {"answer": answer, "second": second, "attempt": run.attempt})


if __name__ == "__main__":
    jetrun.serve(handle)
