#!/usr/bin/env python3
"""A jetrun child in Python, served through the http agent type.

Standard library only. Run it, then point a worker at it:

    python3 examples/python/researcher.py --port 9000
    JETRUN_HTTP_AGENTS=research-py=http://127.0.0.1:9000/run ./bin/parent-worker

For each run the worker POSTs {"runId", "attempt", "input", "milestones", ...}
and reads the answer as newline-delimited JSON events (docs/protocol.md,
"Write a child in another language"). This child researches input.topic in
input.steps steps (each a chunk, a progress report and a milestone), resumes
after the milestones a previous attempt reached, and, with input.approval,
waits for the signal "approve" before it returns its result: the worker
answers the wait with a second POST carrying {"signal": {"name", "payload"}}.
"""

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class WorkerHungUp(Exception):
    """The worker closed the connection: the run was cancelled, taken over or
    its worker stopped. Stop working on it."""


class Child(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/run":
            self.send_error(404, "POST /run")
            return
        length = int(self.headers.get("Content-Length", "0"))
        try:
            req = json.loads(self.rfile.read(length))
        except ValueError as e:
            self.send_error(400, "request is not JSON: %s" % e)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        run_id = req["runId"]
        try:
            self.research(req)
        except WorkerHungUp:
            log("run %s: the worker hung up; stopping" % run_id)

    def emit(self, event):
        try:
            self.wfile.write((json.dumps(event) + "\n").encode())
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError) as e:
            raise WorkerHungUp() from e

    def research(self, req):
        run_id, inp = req["runId"], req.get("input") or {}
        if not isinstance(inp, dict) or not isinstance(inp.get("topic", ""), str):
            self.emit({"error": 'input must be {"topic": "...", "steps": n}', "retryable": False})
            return
        topic = inp.get("topic", "tides")
        steps = int(inp.get("steps", 5))
        delay = float(inp.get("stepDelay", 0.2))
        milestones = req.get("milestones") or []
        reached = {m["name"] for m in milestones}
        # Steps this attempt ran in an earlier POST of the run (the one that
        # waited for the signal): their milestones carry this attempt.
        ran = sum(1 for m in milestones if m["name"].startswith("step-")
                  and (m.get("data") or {}).get("attempt") == req["attempt"])
        signal = req.get("signal")
        if signal:
            log("run %s: got signal %s" % (run_id, signal["name"]))

        started = False
        for i in range(1, steps + 1):
            if "step-%d" % i in reached:
                continue  # done already
            if not started:
                started = True
                log("run %s attempt %d: starting at step %d" % (run_id, req["attempt"], i))
            time.sleep(delay)
            self.emit({"chunk": "step %d: read about %s\n" % (i, topic)})
            self.emit({"progress": {"fraction": i / steps, "phase": "researching",
                                    "message": "step %d of %d" % (i, steps)}})
            self.emit({"milestone": {"name": "step-%d" % i,
                                     "data": {"step": i, "attempt": req["attempt"]}}})
            ran += 1

        approval = None
        if inp.get("approval"):
            if signal and signal["name"] == "approve":
                approval = signal["payload"]
                self.emit({"milestone": {"name": "approved", "data": approval}})
            elif "approved" not in reached:
                self.emit({"progress": {"fraction": 1, "phase": "waiting for approval",
                                        "message": 'send the "approve" signal'}})
                self.emit({"wait": "approve"})
                return  # the worker POSTs again with the signal

        self.emit({"result": {
            "summary": "researched %s in %d steps" % (topic, steps),
            "output": {"topic": topic, "steps": steps, "stepsRunHere": ran,
                       "attempt": req["attempt"], "approval": approval},
        }})
        log("run %s: completed" % run_id)

    def log_message(self, format, *args):
        pass  # one line per run is enough


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000, help="0 picks a free port")
    args = ap.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Child)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print("listening on http://%s:%d/run" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
