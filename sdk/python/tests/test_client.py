"""The caller side against a stand-in of the HTTP API on 127.0.0.1: the
requests each verb sends (method, path, headers, body), how errors come
back, and a stream resumed by Last-Event-ID after the server drops it. The
real API is tested by TestPythonCaller (internal/testkit/e2e)."""

import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jetrun


class StandIn(BaseHTTPRequestHandler):
    """Records each request and answers from the server's script."""

    protocol_version = "HTTP/1.0"

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.seen.append({"method": self.command, "path": self.path, "body": body,
                                 "contentType": self.headers.get("Content-Type"),
                                 "auth": self.headers.get("Authorization"),
                                 "lastEventId": self.headers.get("Last-Event-ID")})
        self.server.answer(self)

    do_GET = do_POST = handle_any

    def send(self, status, obj):
        raw = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format, *args):
        pass


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
        self.server.daemon_threads = True
        self.server.seen = []
        self.server.answer = lambda h: h.send(200, {"id": "r1", "status": "starting"})
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.client = jetrun.Client("http://127.0.0.1:%d" % self.server.server_address[1], token="s3cret", timeout=10)

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_each_verb_sends_the_apis_request(self):
        c = self.client
        c.dispatch("summarize", {"topic": "tides"}, run_id="r1", budget={"tokens": 100})
        c.cancel("r1", "enough")
        c.signal("r1", "approve", {"approved": True})
        c.reply("r1", 2, output="blue")
        c.answer("ask-7", {"approved": True}, digest="sha256:ab", by="ops")
        c.rerun("r1", "plan-2", input={"topic": "eels"}, steps={"plan-1": "x"}, new_run_id="r1-b", budget={"tokens": 9})
        c.get("r/1")
        c.diff("r1", "r1-b")
        got = [(s["method"], s["path"], s["body"]) for s in self.server.seen]
        self.assertEqual(got, [
            ("POST", "/v1/runs", {"agentType": "summarize", "input": {"topic": "tides"}, "runId": "r1",
                                  "budget": {"tokens": 100}}),
            ("POST", "/v1/runs/r1/cancel", {"reason": "enough"}),
            ("POST", "/v1/runs/r1/signals/approve", {"approved": True}),
            ("POST", "/v1/runs/r1/calls/2/reply", {"output": "blue"}),
            ("POST", "/v1/asks/ask-7:answer", {"digest": "sha256:ab", "value": {"approved": True}, "by": "ops"}),
            ("POST", "/v1/runs/r1:rerun", {"fromStep": "plan-2", "input": {"topic": "eels"},
                                            "steps": {"plan-1": "x"}, "runId": "r1-b", "budget": {"tokens": 9}}),
            ("GET", "/v1/runs/r%2F1", None),
            ("GET", "/v1/runs/r1/diff/r1-b", None),
        ])
        for s in self.server.seen:
            self.assertEqual(s["auth"], "Bearer s3cret")
            if s["method"] == "POST":
                self.assertEqual(s["contentType"], "application/json")

    def test_an_error_answer_raises_api_error(self):
        self.server.answer = lambda h: h.send(409, {"error": "answered by ops at 12:00", "code": "conflict"})
        with self.assertRaises(jetrun.APIError) as cm:
            self.client.answer("ask-7", {"approved": True}, digest="d")
        self.assertEqual((cm.exception.status, cm.exception.code), (409, "conflict"))

    def test_run_raises_run_failed_for_a_failure(self):
        self.server.answer = lambda h: h.send(200, {"runId": "r1", "ok": False, "status": "error",
                                                    "error": "n must be positive", "retryable": False})
        with self.assertRaises(jetrun.RunFailed) as cm:
            self.client.run("t", {"n": -1}, run_id="r1")
        self.assertEqual((cm.exception.status, cm.exception.retryable), ("error", False))
        self.assertEqual(self.server.seen[0]["path"], "/v1/runs?wait=true")

    def test_a_dropped_stream_resumes_after_the_last_event(self):
        """The first connection drops after two events (the second one a part
        of a coalesced chunk event); the client reconnects with Last-Event-ID
        naming it and gets the rest once."""
        events = [("5", "status", {"seq": 5}), ("7.0", "chunk", {"seq": 7, "part": 0}),
                  ("7", "chunk", {"seq": 7, "part": 1}), ("9", "status", {"seq": 9}), (None, "end", {})]

        def answer(h):
            last = h.headers.get("Last-Event-ID")
            start = 0 if last is None else [e[0] for e in events].index(last) + 1
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            h.wfile.write(b": keep-alive\n\n")
            for n, (id_, kind, data) in enumerate(events[start:]):
                if last is None and n == 2:
                    h.wfile.write(b"id: 7\nevent: chu")  # cut mid-event: never taken for one
                    h.wfile.flush()
                    h.connection.shutdown(2)
                    return
                if id_ is not None:
                    h.wfile.write(("id: %s\n" % id_).encode())
                h.wfile.write(("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode())

        self.server.answer = answer
        got = [(e.id, e.kind) for e in self.client.stream("r1")]
        self.assertEqual(got, [(e[0], e[1]) for e in events])
        self.assertEqual([s["lastEventId"] for s in self.server.seen], [None, "7.0"])
        self.assertEqual(self.server.seen[0]["path"], "/v1/runs/r1/events")

    def test_stream_after_a_sequence_and_without_follow(self):
        def answer(h):
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            h.wfile.write(b"id: 12\nevent: chunk\ndata: {\"seq\":12}\n\nevent: history-end\ndata: {}\n\n")
        self.server.answer = answer
        got = [(e.id, e.kind, e.data) for e in self.client.stream("r1", after="11", follow=False)]
        self.assertEqual(got, [("12", "chunk", {"seq": 12}), (None, "history-end", {})])
        self.assertEqual(self.server.seen[0]["path"], "/v1/runs/r1/events?follow=false&after=11")


if __name__ == "__main__":
    unittest.main()
