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

    def test_steps_in_threads_keep_their_own_usage(self):
        """Two steps run at once, each reporting twice (the second report
        after both reported once): each step's step line carries its own
        two reports."""
        def handler(run):
            both = threading.Barrier(2)

            def work(i):
                def fn():
                    run.usage(input_tokens=i, model="a")
                    both.wait(10)
                    run.usage(output_tokens=i, model="b")
                    return i
                run.step("s%d" % i, fn)
            threads = [threading.Thread(target=work, args=(i,)) for i in (1, 2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return "done"
        lines = serve(handler)
        self.assertEqual(len(lines), 3)
        for i in (1, 2):
            self.assertIn({"step": {"name": "s%d" % i, "output": i,
                                    "usage": [{"inputTokens": i, "model": "a"}, {"outputTokens": i, "model": "b"}]}}, lines)

    def test_reached_knows_the_milestones_marked_since_the_request(self):
        def handler(run):
            before = run.reached("read")
            run.milestone("read")
            return [before, run.reached("read"), run.reached("planned")]
        req = dict(REQ, milestones=[{"sequence": 1, "name": "planned"}])
        self.assertEqual(serve(handler, req)[-1], {"result": {"summary": "", "output": [False, True, True]}})

    def test_a_reservation_is_answered_on_stdin(self):
        got = []

        def handler(run):
            got.append(run.reserve(input_tokens=400, cost_micros=9))
            got.append(run.reserve(output_tokens=200))
            return "reserved"
        answers = ('{"reserved":{"ok":true}}\n'
                   '{"reserved":{"ok":false,"reason":"budget-exceeded","error":"tree t1 has 100 tokens left"}}\n')
        self.assertEqual(serve(handler, answers=answers), [
            {"reserve": {"inputTokens": 400, "costMicros": 9}},
            {"reserve": {"outputTokens": 200}},
            {"result": {"summary": "", "output": "reserved"}}])
        self.assertTrue(got[0])
        self.assertFalse(got[1])
        self.assertEqual((got[1].reason, got[1].error), ("budget-exceeded", "tree t1 has 100 tokens left"))

    def test_the_library_refuses_what_the_worker_would(self):
        def handler(run):
            for bad in (lambda: run.progress(1.5), lambda: run.milestone(""), lambda: run.step("a b", lambda: 1),
                        lambda: run.wait("a.b"), lambda: run.call("x*", 1), lambda: run.chunk(None),
                        lambda: run.usage(input_tokens=-1), lambda: run.reserve()):
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
    """A child behind the http agent type: a wait, a call or a reservation
    ends the response, and the worker's next POST, with the answer, runs the
    handler again from the top; each answer is stored as a step, so the run
    again finds the earlier ones, in order."""

    def setUp(self):
        self.ran = []

        def handler(run):
            plan = run.step("plan", lambda: self.ran.append("plan") or ["a", "b"])
            first = run.call("ask", {"n": 1})
            second = run.call("ask", {"n": 2})
            ok = run.wait("approve")
            held = run.reserve(input_tokens=10)
            return jetrun.Result("approved" if ok.get("yes") else "rejected", [plan, first, second, bool(held)])

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

    def test_each_answer_resumes_and_is_kept(self):
        """Plays the worker: stores step lines, answers the line a response
        ends with in the next request."""
        steps, answer, responses = {}, {}, []
        while len(responses) < 10:
            lines = self.post(dict(REQ, steps=dict(steps), **answer))
            responses.append(lines)
            for l in lines:
                if "step" in l:
                    steps.setdefault(l["step"]["name"], l["step"]["output"])
            last = lines[-1]
            if "result" in last:
                break
            if "call" in last:
                answer = {"reply": {"name": "ask", "output": last["call"]["input"]["n"] * 10}}
            elif "wait" in last:
                answer = {"signal": {"name": "approve", "payload": {"yes": True}}}
            elif "reserve" in last:
                answer = {"reserved": {"ok": True}}
        self.assertEqual(responses[-1][-1], {"result": {"summary": "approved", "output": [["a", "b"], 10, 20, True]}})
        self.assertEqual([r[-1] for r in responses[:-1]], [
            {"call": {"name": "ask", "input": {"n": 1}}}, {"call": {"name": "ask", "input": {"n": 2}}},
            {"wait": "approve"}, {"reserve": {"inputTokens": 10}}])
        self.assertEqual(sorted(steps), ["jetrun:reply:ask:1", "jetrun:reply:ask:2", "jetrun:reserved:1",
                                         "jetrun:signal:approve:1", "plan"])
        self.assertEqual(self.ran, ["plan"])


class SessionTest(unittest.TestCase):
    def test_a_run_under_a_session_reads_its_earlier_turns(self):
        turn = {"runId": "r0", "status": "completed", "input": {"objective": "a"}, "output": "ok",
                "steps": [{"name": "heard", "output": "a"}]}
        got = serve(lambda run: {"session": run.session, "history": run.history},
                    request=dict(REQ, session="notes", history=[turn]))
        self.assertEqual(got, [{"result": {"summary": "", "output": {"session": "notes", "history": [turn]}}}])
        self.assertEqual(serve(lambda run: [run.session, run.history]), [{"result": {"summary": "", "output": [None, []]}}])


class VariablesTest(unittest.TestCase):
    def test_variables_are_the_inputs_with_the_stored_changes_in_order(self):
        req = dict(REQ, attempt=2, input={"variables": {"a": 1, "b": "x"}}, steps={
            "variables.1.10": {"key": "a", "value": 10}, "variables.1.2": {"key": "a", "value": 2},
            "variables.1.3": {"key": "c", "value": [3]}, "plan": {"key": "b", "value": "not a variable"}})

        def handler(run):
            before = run.variables()
            run.set_variable("b", {"y": 1})
            run.set_variable("d", None)
            return [before, run.variables()]
        got = serve(handler, request=req)
        self.assertEqual(got, [
            {"step": {"name": "variables.2.1", "output": {"key": "b", "value": {"y": 1}}}},
            {"step": {"name": "variables.2.2", "output": {"key": "d", "value": None}}},
            {"result": {"summary": "", "output": [{"a": 10, "b": "x", "c": [3]},
                                                  {"a": 10, "b": {"y": 1}, "c": [3], "d": None}]}}])

    def test_a_variable_set_again_by_a_later_attempt_keeps_its_stored_value(self):
        req = dict(REQ, steps={"variables.1.1": {"key": "k", "value": "stored"}})
        got = serve(lambda run: [run.set_variable("k", "again"), run.variables()][1], request=req)
        self.assertEqual(got, [{"result": {"summary": "", "output": {"k": "stored"}}}])

    def test_run_sub_agent_passes_variables_down_and_takes_the_childs_changes(self):
        class Client:  # the HTTP API as run_sub_agent uses it
            def __init__(self):
                self.inputs = []

            def run(self, agent_type, input, run_id=None, **fields):
                self.inputs.append(input)
                return {"id": run_id, "status": "completed", "output": "done"}

            def stream(self, run_id, follow=True):
                data = [{"name": "variables.1.1", "output": {"key": "same", "value": 1}},
                        {"name": "other", "output": {"key": "x", "value": 9}},
                        {"name": "variables.1.2", "output": {"key": "new", "value": "v"}},
                        {"name": "variables.1.3", "output": None, "error": "boom"}]
                return [jetrun.Event(str(i), "step", {"kind": "step", "data": d}) for i, d in enumerate(data)] + \
                    [jetrun.Event(None, "history-end", {})]
        client = Client()
        subs = jetrun.SubAgents([jetrun.Delegate("memo")])

        def handler(run):
            run.set_variable("same", 1)
            return [jetrun.run_sub_agent(run, subs, client, "c1", "task_memo", {"objective": "o"}), run.variables()]
        got = serve(handler)
        self.assertEqual(client.inputs, [{"objective": "o", "variables": {"same": 1}}])
        self.assertEqual(got, [
            {"step": {"name": "variables.1.1", "output": {"key": "same", "value": 1}}},
            {"step": {"name": "variables.1.2", "output": {"key": "new", "value": "v"}}},
            {"result": {"summary": "", "output": ["done", {"same": 1, "new": "v"}]}}])


if __name__ == "__main__":
    unittest.main()
