"""The shared protocol fixtures (docs/protocol/fixtures/, described in
docs/protocol.md, "Protocol fixtures"), played through the library: each
verb, called as the fixture says, writes exactly the fixture's lines, reads
its stdin lines, and returns what the fixture says. The Go worker's test
(TestFixturesAgainstTheWorker) plays the same files against the worker."""

import io
import json
import os
import unittest

import jetrun

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "protocol", "fixtures")


def load_fixtures():
    out = {}
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".json"):
            with open(os.path.join(FIXTURES, name)) as f:
                out[name[:-5]] = json.load(f)
    return out


def usage_kwargs(u):
    return {"input_tokens": u.get("inputTokens", 0), "output_tokens": u.get("outputTokens", 0),
            "cost_micros": u.get("costMicros", 0), "model": u.get("model"), "answered_at_ms": u.get("answeredAtMs")}


def play(test, run, child):
    """Calls the fixture's verbs on run, checking what each returns."""
    for c in child:
        verb, args = c["verb"], c.get("args") or {}
        with test.subTest(verb=verb, args=args):
            if verb == "chunk":
                run.chunk(args["data"])
            elif verb == "print":
                run.print(args["text"])
            elif verb == "progress":
                run.progress(args.get("fraction"), args.get("phase"), args.get("message"), args.get("data"))
            elif verb == "milestone":
                run.milestone(args["name"], args.get("data"))
            elif verb == "usage":
                run.usage(**usage_kwargs(args))
            elif verb == "step":
                ran = []

                def work():
                    ran.append(True)
                    for u in args.get("usage") or []:
                        run.usage(**usage_kwargs(u))
                    return args["output"]

                got = run.step(args["name"], work)
                test.assertEqual(got, c["returns"])
                test.assertEqual(bool(ran), c["runs"], "whether the step's function ran")
            elif verb == "wait":
                test.assertEqual(run.wait(args["signal"], ask=args.get("ask")), c["returns"])
            elif verb == "call":
                if "raises" in c:
                    with test.assertRaises(jetrun.CallError) as cm:
                        run.call(args["name"], args.get("input"), ask=args.get("ask"))
                    test.assertEqual(cm.exception.message, c["raises"])
                else:
                    test.assertEqual(run.call(args["name"], args.get("input"), ask=args.get("ask")), c["returns"])
            elif verb == "reserve":
                got = run.reserve(args.get("inputTokens", 0), args.get("outputTokens", 0), args.get("costMicros", 0),
                                  limit=args.get("limit"))
                answer = {"ok": got.ok, "reason": got.reason, "error": got.error}
                test.assertEqual({k: v for k, v in answer.items() if v != ""}, c["returns"])
                test.assertEqual(bool(got), c["returns"]["ok"])
            elif verb == "result":
                run.result(args.get("summary", ""), args.get("output"))
            elif verb == "fail":
                run.fail(args["error"], retryable=args.get("retryable", False), retry_after_ms=args.get("retryAfterMs"))
            else:
                test.fail("unknown verb %r" % verb)


def written(out):
    """The lines a child wrote, as the fixtures spell them."""
    lines = []
    for line in out.getvalue().splitlines():
        if line.startswith(jetrun.MARKER):
            lines.append({"out": json.loads(line[len(jetrun.MARKER):])})
        else:
            lines.append({"text": line})
    return lines


class FixtureTest(unittest.TestCase):
    def test_every_fixture_attempt(self):
        fixtures = load_fixtures()
        self.assertGreaterEqual(len(fixtures), 8, "fixtures in %s" % FIXTURES)
        for name, fx in fixtures.items():
            for attempt in fx["attempts"]:
                with self.subTest(fixture=name, attempt=attempt["request"]["attempt"]):
                    lines = [l for c in attempt["child"] for l in c["lines"]]
                    stdin = io.StringIO(json.dumps(attempt["request"]) + "\n" +
                                        "".join(json.dumps(l["in"]) + "\n" for l in lines if "in" in l))
                    out = io.StringIO()
                    jetrun.serve(lambda run: play(self, run, attempt["child"]), stdin=stdin, stdout=out)
                    self.assertEqual(written(out), [l for l in lines if "in" not in l])
                    self.assertEqual(stdin.readline(), "", "every stdin line read")

    def test_the_fixtures_cover_every_verb_and_line(self):
        verbs, keys = set(), set()
        for fx in load_fixtures().values():
            for attempt in fx["attempts"]:
                for c in attempt["child"]:
                    verbs.add(c["verb"])
                    for l in c["lines"]:
                        keys.update(l.get("out", {}))
        self.assertEqual(sorted(verbs), ["call", "chunk", "fail", "milestone", "print", "progress", "reserve",
                                         "result", "step", "usage", "wait"])
        # every line of docs/protocol.md's table, and the keys beside them
        self.assertEqual(sorted(keys), ["ask", "call", "chunk", "error", "milestone", "progress", "reserve",
                                        "result", "retryAfterMs", "retryable", "step", "usage", "wait"])

    def test_the_request(self):
        fx = load_fixtures()["steps"]
        req = fx["attempts"][1]["request"]
        run = jetrun.Run(req, io.StringIO(), io.StringIO())
        self.assertEqual((run.run_id, run.agent_type, run.attempt, run.input, run.depth, run.parent),
                         ("fx-steps", "fixture", 2, {"question": "why tides?"}, 0, None))
        self.assertEqual(run.steps, req["steps"])
        self.assertTrue(run.reached("searched"))
        self.assertFalse(run.reached("answered"))
        self.assertEqual([m["name"] for m in run.milestones], ["searched"])


if __name__ == "__main__":
    unittest.main()
