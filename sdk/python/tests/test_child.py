"""The child side beyond the fixtures: how serve ends a run from what the
handler returns or raises, what the library refuses to write, a worker
that goes away, and the http agent type's server."""

import io
import json
import threading
import unittest
import urllib.request

import jetrun

REQ = {"runId": "r1", "agentType": "t", "attempt": 1, "input": {"n": 2}, "milestones": [], "depth": 0, "steps": {}}


def serve(handler, request=REQ, answers=""):
    out = io.StringIO()
    jetrun.serve(handler, stdin=io.StringIO(json.dumps(request) + "\n" + answers), stdout=out)
    return [json.loads(l[len(jetrun.MARKER):]) if l.startswith(jetrun.MARKER) else l
            for l in out.getvalue().splitlines()]


class ServeTest(unittest.TestCase):
    def test_a_returned_result_completes_the_run(self):
        self.assertEqual(serve(lambda run: jetrun.Result("two", {"n": run.input["n"]})),
                         [{"result": {"summary": "two", "output": {"n": 2}}}])

    def test_a_returned_value_is_the_output(self):
        self.assertEqual(serve(lambda run: [1, 2]), [{"result": {"summary": "", "output": [1, 2]}}])

    def test_retryable_error_is_retried(self):
        def handler(run):
            raise jetrun.RetryableError("rate limited", retry_after_ms=6000)
        self.assertEqual(serve(handler), [{"error": "rate limited", "retryable": True, "retryAfterMs": 6000}])

    def test_other_exceptions_end_the_run_error(self):
        def handler(run):
            raise KeyError("topic")
        self.assertEqual(serve(handler), [{"error": "KeyError: 'topic'", "retryable": False}])

    def test_an_outcome_written_by_the_handler_is_the_only_one(self):
        def handler(run):
            run.fail("bad input")
            return jetrun.Result("ignored")
        self.assertEqual(serve(handler), [{"error": "bad input", "retryable": False}])

    def test_a_failed_step_is_not_stored_and_its_usage_is_the_runs(self):
        calls = []

        def handler(run):
            def work():
                calls.append(1)
                run.usage(input_tokens=5, model="m")
                if len(calls) == 1:
                    raise TimeoutError("model timed out")
                return "ok"
            with self.assertRaises(TimeoutError):
                run.step("s", work)
            return run.step("s", work)
        self.assertEqual(serve(handler), [
            {"usage": {"inputTokens": 5, "model": "m"}},
            {"step": {"name": "s", "output": "ok", "usage": {"inputTokens": 5, "model": "m"}}},
            {"result": {"summary": "", "output": "ok"}}])
        self.assertEqual(len(calls), 2)

    def test_a_stored_step_is_returned_and_not_run_again(self):
        def handler(run):
            return run.step("plan", lambda: self.fail("ran a stored step"))
        self.assertEqual(serve(handler, dict(REQ, steps={"plan": {"q": 1}})),
                         [{"result": {"summary": "", "output": {"q": 1}}}])

    def test_the_library_refuses_what_the_worker_would(self):
        def handler(run):
            for bad in (lambda: run.progress(1.5), lambda: run.milestone(""), lambda: run.step("a b", lambda: 1),
                        lambda: run.wait("a.b"), lambda: run.call("x*", 1), lambda: run.chunk(None),
                        lambda: run.usage(input_tokens=-1)):
                with self.assertRaises(ValueError):
                    bad()
            return "checked"
        self.assertEqual(serve(handler), [{"result": {"summary": "", "output": "checked"}}])

    def test_stdin_closed_during_a_wait_stops_the_child(self):
        def handler(run):
            run.wait("approve")
            self.fail("went on after the worker went away")
        with self.assertRaises(SystemExit) as cm:
            serve(handler)
        self.assertEqual(cm.exception.code, 1)


class HTTPTest(unittest.TestCase):
    """A child behind the http agent type: a wait ends the response, and the
    worker's next POST, with the signal, runs the handler again."""

    def setUp(self):
        self.ran = []

        def handler(run):
            plan = run.step("plan", lambda: self.ran.append("plan") or ["a", "b"])
            ok = run.wait("approve")
            return jetrun.Result("approved" if ok.get("yes") else "rejected", plan)

        self.server = jetrun.http_server(handler, port=0)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/run" % self.server.server_address[1]

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def post(self, body):
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            self.assertEqual(resp.headers["Content-Type"], "application/x-ndjson")
            return [json.loads(l) for l in resp.read().decode().splitlines()]

    def test_a_wait_parks_and_the_answer_resumes(self):
        first = self.post(REQ)
        self.assertEqual(first, [{"step": {"name": "plan", "output": ["a", "b"]}}, {"wait": "approve"}])
        second = self.post(dict(REQ, steps={"plan": ["a", "b"]}, signal={"name": "approve", "payload": {"yes": True}}))
        self.assertEqual(second, [{"result": {"summary": "approved", "output": ["a", "b"]}}])
        self.assertEqual(self.ran, ["plan"])


if __name__ == "__main__":
    unittest.main()
