#!/usr/bin/env python3
"""Dispatches a run through jetrun.Client, follows its events until it ends
(one JSON line per event, flushed) and awaits it; internal/testkit/e2e
(TestPythonFollowsARunAcrossAParentWorkerKill) kills the parent-worker
under it and starts another: the stream resumes by Last-Event-ID by itself.

    PYTHONPATH=sdk/python python3 live_follow.py URL AGENT_TYPE RUN_ID INPUT_JSON
"""

import json
import sys

import jetrun


def main():
    url, agent_type, run_id, inp = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    c = jetrun.Client(url, timeout=60)
    c.dispatch(agent_type, inp, run_id=run_id)
    for ev in c.stream(run_id):
        line = {"what": "event", "id": ev.id, "kind": ev.kind}
        if ev.kind == "step":
            line["step"] = ev.data["data"]["name"]
        print(json.dumps(line), flush=True)
    row = c.await_run(run_id)
    print(json.dumps({"what": "final", "status": row["status"], "summary": row["summary"],
                      "attempt": row["attempt"], "output": row.get("output")}), flush=True)


if __name__ == "__main__":
    main()
