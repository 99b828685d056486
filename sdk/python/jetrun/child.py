"""The child side of jetrun's line protocol (docs/protocol.md, "Write a
child in another language"): a run as the exec agent type hands it to a
command, on stdin and stdout, or as the http agent type POSTs it.

    import jetrun

    def handle(run: jetrun.Run) -> jetrun.Result:
        plan = run.step("plan", lambda: make_plan(run.input))  # stored once per run
        run.milestone("planned", {"steps": len(plan)})
        return jetrun.Result("planned", plan)

    jetrun.serve(handle)
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Tuple, TypeVar, cast

MARKER = "@jetrun "
"""Starts a stdout line that carries an event (exec); other lines are chunks."""

T = TypeVar("T")
JSON = Any
"""Any value json.dumps encodes."""

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_STEP_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class Stopped(Exception):
    """The worker went away (stdin closed, the connection dropped): the run
    was cancelled, taken over or its worker stopped. Stop working on it."""


class CallError(Exception):
    """The caller's answer to a call was an error (its handler failed, or the
    call timed out). The run goes on: catch it to decide what to do."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


class RetryableError(Exception):
    """Raise it from a handler to end the attempt with an error that is
    retried as a new attempt (steps and milestones kept), after
    retry_after_ms when given, else after the worker's growing delay."""

    def __init__(self, message: str, retry_after_ms: Optional[int] = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class Result:
    """What a run returns: a summary (text) and an output (any JSON value)."""

    def __init__(self, summary: str = "", output: JSON = None) -> None:
        self.summary = summary
        self.output = output

    def __repr__(self) -> str:
        return "Result(%r, %r)" % (self.summary, self.output)


class Reserved:
    """The answer to a reservation: ok, or refused with reason
    "budget-exceeded" and an error saying which budget. True when ok."""

    def __init__(self, ok: bool, reason: str = "", error: str = "") -> None:
        self.ok = ok
        self.reason = reason
        self.error = error

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return "Reserved(%r, %r, %r)" % (self.ok, self.reason, self.error)


class _Parked(BaseException):
    """http: the response ended with a wait, call or reserve line; the
    worker POSTs again with the answer. Not an error: http_server ends the
    response."""


class Run:
    """One attempt of a run, as its child sees it: the request, and the
    verbs that map onto the run (the lines of docs/protocol.md)."""

    def __init__(self, request: Mapping[str, Any], out: IO[str], answers: Optional[IO[str]] = None) -> None:
        """request is the run as the worker sent it; event lines go to out;
        answers to waits and calls are read from answers (exec: stdin). With
        answers None (http), a wait or call the request does not answer
        parks the run: the worker asks again with the answer."""
        self.request: Dict[str, Any] = dict(request)
        self._out = out
        self._answers = answers
        self._lock = threading.Lock()
        self._steps: Dict[str, JSON] = dict(request.get("steps") or {})
        self._local = threading.local()  # per thread: the usage reported inside its running steps
        self._marked: List[str] = []  # milestones this child marked since the request
        self._asked: Dict[str, int] = {}  # http: waits, calls and reservations so far, by kind and name
        self._ended = False
        self._var_n = 0  # the variables this attempt set (their step names)

    # The request.

    @property
    def run_id(self) -> str:
        return str(self.request.get("runId", ""))

    @property
    def agent_type(self) -> str:
        return str(self.request.get("agentType", ""))

    @property
    def attempt(self) -> int:
        """1 for the first attempt; more after a takeover or a retry."""
        return int(self.request.get("attempt") or 1)

    @property
    def input(self) -> JSON:
        return self.request.get("input")

    @property
    def milestones(self) -> List[Dict[str, Any]]:
        """The milestones reached so far, by earlier attempts too, in order:
        [{"sequence", "name", "data"}]."""
        return list(self.request.get("milestones") or [])

    def reached(self, name: str) -> bool:
        """Whether a milestone of this name was reached: by any attempt
        before the request, or marked since."""
        return name in self._marked or any(m.get("name") == name for m in self.milestones)

    @property
    def steps(self) -> Dict[str, JSON]:
        """The outputs of the steps stored so far, by name."""
        return dict(self._steps)

    @property
    def session(self) -> Optional[str]:
        """The sub-agent session the run is a turn of (the dispatch's "session")."""
        return self.request.get("session")

    @property
    def history(self) -> List[Dict[str, Any]]:
        """The session's earlier turns, oldest first: each {"runId", "status",
        "input", "output", "summary", "error", "steps": [{"name", "output"}]}."""
        return list(self.request.get("history") or [])

    @property
    def parent(self) -> Optional[str]:
        return self.request.get("parent")

    @property
    def depth(self) -> int:
        return int(self.request.get("depth") or 0)

    @property
    def ended(self) -> bool:
        """Whether a result or an error was written."""
        return self._ended

    # Events.

    def chunk(self, data: JSON) -> None:
        """Streams a chunk: any JSON value (strings stay strings)."""
        if data is None:
            raise ValueError("a chunk must not be None")
        self._event({"chunk": data})

    def progress(self, fraction: Optional[float] = None, phase: Optional[str] = None,
                 message: Optional[str] = None, data: JSON = None) -> None:
        """Reports progress (coalesced by the worker); fraction in 0..1."""
        if fraction is not None and not 0 <= fraction <= 1:
            raise ValueError("progress fraction must be between 0 and 1, got %r" % (fraction,))
        p = _without_none({"fraction": fraction, "phase": phase, "message": message, "data": data})
        self._event({"progress": p})

    def milestone(self, name: str, data: JSON = None) -> None:
        """Marks a durable milestone: the next attempt's request lists it."""
        if not name or len(name.encode()) > 256:
            raise ValueError("a milestone name is 1 to 256 bytes, got %r" % (name,))
        self._event({"milestone": _without_none({"name": name, "data": data})})
        self._marked.append(name)

    def usage(self, input_tokens: int = 0, output_tokens: int = 0, cost_micros: int = 0,
              model: Optional[str] = None, answered_at_ms: Optional[int] = None) -> None:
        """Reports what work spent. Inside a step's function it is the step's
        (stored with it, counted on the run once); elsewhere the run's.
        answered_at_ms is when the provider answered the model call (Unix
        ms, int(time.time() * 1000) once the answer is in): a provider
        limit then counts a call granted at a window's very end in the
        window the provider counted it in."""
        u = _usage(input_tokens, output_tokens, cost_micros, model, answered_at_ms)
        running = self._running_steps()
        if running:
            running[-1].append(u)
            return
        self._event({"usage": u})

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """Returns the stored output of step name, or calls fn, stores what
        it returns (any JSON value) with what it spent (usage reported while
        it ran) and returns it. A stored step never runs again, whatever
        dies when; one interrupted by a crash runs again (at most twice).
        Typed as fn's result: a stored output is that value after a JSON
        round trip (a tuple comes back a list, a dict's keys strings)."""
        if not _STEP_NAME.match(name):
            raise ValueError("a step name is 1 to 128 of A-Z a-z 0-9 - _ . :, got %r" % (name,))
        if name in self._steps:
            return cast(T, self._steps[name])
        running = self._running_steps()
        running.append([])
        try:
            output = fn()
        except BaseException:
            spent = running.pop()
            for u in spent:  # not stored: what it spent is the run's
                self.usage(**_usage_kwargs(u))
            raise
        spent = running.pop()
        line: Dict[str, Any] = {"name": name, "output": output}
        if spent:  # on the step line: stored with the step in one write
            line["usage"] = spent[0] if len(spent) == 1 else spent
        self._event({"step": line})
        self._steps[name] = output
        return output

    def variables(self) -> Dict[str, JSON]:
        """The run's variables: its input's "variables" object with the
        changes the run made (set_variable, and its completed sub-agents'),
        earlier attempts' included (docs/protocol.md, "Sub-agents")."""
        inp = self.input
        vars: Dict[str, JSON] = dict(inp["variables"]) if isinstance(inp, dict) and isinstance(inp.get("variables"), dict) else {}
        with self._lock:
            steps = list(self._steps.items())
        vars.update(variable_changes(sorted(
            ((name, out) for name, out in steps if _variable_order(name) is not None),
            key=lambda s: _variable_order(s[0]) or (0, 0)))[0])
        return vars

    def set_variable(self, key: str, value: JSON) -> None:
        """Sets the run's variable key to value, stored as a durable step
        variables.<attempt>.<n> ({"key", "value"}), so a later attempt sees
        it; a sub-agent's caller gets the variables it changed once it
        completes."""
        if not key:
            raise ValueError("set variable: empty key")
        with self._lock:
            self._var_n += 1
            n = self._var_n
        self.step("%s%d.%d" % (VARIABLE_PREFIX, self.attempt, n), lambda: {"key": key, "value": value})

    def _running_steps(self) -> List[List[Dict[str, Any]]]:
        """This thread's running steps, innermost last: the usage each
        reported so far."""
        running: Optional[List[List[Dict[str, Any]]]] = getattr(self._local, "running", None)
        if running is None:
            running = self._local.running = []
        return running

    def wait(self, signal: str, ask: Optional[Mapping[str, Any]] = None) -> JSON:
        """Parks the run until the signal arrives and returns its payload.
        With ask ({"kind", "title", "payload", "choices", "schema",
        "deadlineMs", "default"}: docs/protocol.md, "People in the loop")
        the wait says what a person is asked."""
        _check_token("signal name", signal)
        line: Dict[str, Any] = {"wait": signal}
        if ask is not None:
            line["ask"] = dict(ask)
        return self._exchange(line, "signal", signal).get("payload")

    def call(self, name: str, input: JSON = None, ask: Optional[Mapping[str, Any]] = None) -> JSON:
        """Asks the run's caller (docs/protocol.md, "Calls") and returns its
        output; raises CallError when the answer is an error. Durable: a run
        taken over gets the stored reply, the caller is asked once. With
        ask (as wait's) the call is meant for a person."""
        _check_token("call name", name)
        c = _without_none({"name": name, "input": input, "ask": None if ask is None else dict(ask)})
        return _reply(name, self._exchange({"call": c}, "reply", name))

    def reserve(self, input_tokens: int = 0, output_tokens: int = 0, cost_micros: int = 0,
                limit: Optional[str] = None) -> Reserved:
        """Holds spend against the run tree's budget before it is paid (a
        model call's worst case): the next usage report settles it, the end
        of the attempt releases what none settled. A refusal is an answer
        (falsy, reason "budget-exceeded"), not the end of the run. With
        limit it also waits for room on that provider limit, shared by the
        fleet (an empty amount then holds one request and one call slot); a
        limit no one configured is refused with reason "unknown-limit"."""
        u: Dict[str, Any] = _usage(input_tokens, output_tokens, cost_micros, None)
        if limit is not None:
            _check_token("limit name", limit)
            u["limit"] = limit
        elif not u:
            raise ValueError("a reservation must hold some tokens or cost, or name a limit")
        got = self._exchange({"reserve": u}, "reserved", None)
        return Reserved(bool(got.get("ok")), str(got.get("reason") or ""), str(got.get("error") or ""))

    def _exchange(self, line: Mapping[str, Any], key: str, name: Optional[str]) -> Dict[str, Any]:
        """Writes line (a wait, a call, a reservation) and returns its
        answer, the object under key of the line the worker answers with.

        exec: the answer is the next stdin line. http: the response ends
        (the run parks) and the worker's next request carries the answer,
        for which the handler runs again from the top; so each answer is
        stored as a step ("jetrun:<key>:<name>:<n>", the n-th of its kind
        in the handler) when first seen, and a handler run again finds the
        earlier ones there, in order, whatever the request carries."""
        if self._answers is not None:
            self._event(line)
            return self._answer(key)
        label = key if name is None else key + ":" + name
        n = self._asked.get(label, 0) + 1
        self._asked[label] = n
        step = "jetrun:%s:%d" % (label, n)
        if step in self._steps:
            return dict(self._steps[step])
        got = self.request.get(key)
        if isinstance(got, dict) and (name is None or got.get("name") == name):
            self.request.pop(key)  # this request answers it
            self._event({"step": {"name": step, "output": got}})
            self._steps[step] = got
            return dict(got)
        self._event(line)
        raise _Parked()

    def result(self, summary: str = "", output: JSON = None) -> None:
        """Completes the run."""
        self._event({"result": _without_none({"summary": summary, "output": output})})
        self._ended = True

    def fail(self, error: str, retryable: bool = False, retry_after_ms: Optional[int] = None) -> None:
        """Ends the attempt with an error: the run ends "error", or with
        retryable it is tried again as a new attempt (after retry_after_ms
        when given)."""
        if not error:
            raise ValueError("an error needs a text")
        line: Dict[str, Any] = {"error": error, "retryable": bool(retryable or retry_after_ms is not None)}
        if retry_after_ms is not None:
            line["retryAfterMs"] = int(retry_after_ms)
        self._event(line)
        self._ended = True

    # Lines.

    def _event(self, *evs: Mapping[str, Any]) -> None:
        prefix = MARKER if self._answers is not None else ""
        self._write("\n".join(prefix + json.dumps(ev, separators=(",", ":")) for ev in evs))

    def print(self, text: str) -> None:
        """exec: writes a plain stdout line, which is a chunk (the line and
        its newline). print() to stdout does the same."""
        self._write(text)

    def _write(self, line: str) -> None:
        with self._lock:
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (BrokenPipeError, ConnectionError, ValueError) as e:  # ValueError: closed file
                raise Stopped("the worker went away: %s" % e) from e

    def _answer(self, key: str) -> Dict[str, Any]:
        if self._answers is None:
            raise _Parked()
        line = self._answers.readline()
        if not line:
            raise Stopped("stdin closed while waiting for a %s" % key)
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise Stopped("stdin line %r is not JSON: %s" % (line[:60], e)) from e
        ans = msg.get(key) if isinstance(msg, dict) else None
        if not isinstance(ans, dict):
            raise Stopped("stdin line %r is not a %s" % (line[:60], key))
        return ans


VARIABLE_PREFIX = "variables."
"""Prefixes the names of the steps that set variables."""


def _variable_order(name: str) -> Optional[Tuple[int, int]]:
    """(attempt, n) of a variable step's name variables.<attempt>.<n>, or None."""
    if not name.startswith(VARIABLE_PREFIX):
        return None
    parts = name[len(VARIABLE_PREFIX):].split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def variable_changes(steps: Iterable[Tuple[str, JSON]]) -> Tuple[Dict[str, JSON], List[str]]:
    """The variables steps (name, output) set, in the order given (the last
    assignment of a key wins), and the keys in the order first set."""
    vars: Dict[str, JSON] = {}
    keys: List[str] = []
    for name, out in steps:
        if not name.startswith(VARIABLE_PREFIX) or not isinstance(out, dict) or not out.get("key"):
            continue
        if out["key"] not in vars:
            keys.append(out["key"])
        vars[out["key"]] = out.get("value")
    return vars, keys


def _reply(name: str, reply: Mapping[str, Any]) -> JSON:
    if reply.get("error"):
        raise CallError(name, str(reply["error"]))
    return reply.get("output")


def _check_token(what: str, name: str) -> None:
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise ValueError("a %s is 1 to 64 of A-Z a-z 0-9 _ -, got %r" % (what, name))


def _without_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _usage(input_tokens: int, output_tokens: int, cost_micros: int, model: Optional[str],
           answered_at_ms: Optional[int] = None) -> Dict[str, Any]:
    if min(input_tokens, output_tokens, cost_micros) < 0:
        raise ValueError("usage counts must not be negative")
    if answered_at_ms is not None and (not isinstance(answered_at_ms, int) or answered_at_ms < 0):
        raise ValueError("usage answered_at_ms must be a whole number of Unix ms, got %r" % (answered_at_ms,))
    u: Dict[str, Any] = {}
    if input_tokens:
        u["inputTokens"] = int(input_tokens)
    if output_tokens:
        u["outputTokens"] = int(output_tokens)
    if cost_micros:
        u["costMicros"] = int(cost_micros)
    if model:
        u["model"] = model
    if answered_at_ms:
        u["answeredAtMs"] = answered_at_ms
    return u


def _usage_kwargs(u: Mapping[str, Any]) -> Dict[str, Any]:
    return {"input_tokens": u.get("inputTokens", 0), "output_tokens": u.get("outputTokens", 0),
            "cost_micros": u.get("costMicros", 0), "model": u.get("model"), "answered_at_ms": u.get("answeredAtMs")}


Handler = Callable[[Run], Any]
"""A child's code: it gets the Run and returns a Result (or any JSON value,
the output), or raises (RetryableError: retried)."""


def finish(run: Run, handler: Handler) -> None:
    """Runs handler on run and writes its outcome, unless it wrote one: a
    Result or a value (the output) completes the run; RetryableError fails
    it retryable; any other exception fails it with its text. Stopped and
    parking end quietly."""
    try:
        out = handler(run)
    except (Stopped, _Parked):
        raise
    except RetryableError as e:
        if not run.ended:
            run.fail(str(e) or type(e).__name__, retryable=True, retry_after_ms=e.retry_after_ms)
        return
    except Exception as e:  # the run ends "error" with it
        if not run.ended:
            run.fail("%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__)
        return
    if run.ended:
        return
    if isinstance(out, Result):
        run.result(out.summary, out.output)
    else:
        run.result("", out)


def serve(handler: Handler, stdin: Optional[IO[str]] = None, stdout: Optional[IO[str]] = None) -> None:
    """Serves one run through the exec agent type: reads the request from
    stdin's first line, runs handler, writes its outcome. Exits with status
    1 when the worker went away (Stopped)."""
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    line = stdin.readline()  # never stdin.read(): it stays open for signals and replies
    if not line:
        _die("jetrun: no request on stdin")
    try:
        request = json.loads(line)
    except ValueError as e:
        _die("jetrun: the request is not JSON: %s" % e)
    try:
        finish(Run(request, stdout, stdin), handler)
    except Stopped as e:
        _die("jetrun: run %s: %s" % (request.get("runId"), e))


def _die(msg: str) -> NoReturn:
    print(msg, file=sys.stderr, flush=True)
    sys.exit(1)


class _ResponseLines:
    """The text side of an http response body, written line by line."""

    def __init__(self, wfile: Any) -> None:
        self._w = wfile

    def write(self, s: str) -> int:
        self._w.write(s.encode())
        return len(s)

    def flush(self) -> None:
        self._w.flush()


def http_server(handler: Handler, host: str = "127.0.0.1", port: int = 0, path: str = "/run") -> ThreadingHTTPServer:
    """Returns a server (not yet serving: call serve_forever) for the http
    agent type: each POST to path is one request of a run, answered with
    newline-delimited events as they are written. A wait or call the
    request does not answer ends the response; the worker POSTs again with
    the answer, and handler runs again from the top: what comes before the
    wait must be durable (steps, milestones), so it is not done twice."""

    class _Child(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != path:
                self.send_error(404, "POST %s" % path)
                return
            length = int(self.headers.get("Content-Length", "0"))
            try:
                request = json.loads(self.rfile.read(length))
            except ValueError as e:
                self.send_error(400, "the request is not JSON: %s" % e)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            try:
                finish(Run(request, cast(IO[str], _ResponseLines(self.wfile))), handler)
            except (_Parked, Stopped):
                pass  # parked: the worker asks again; stopped: it hung up

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), _Child)
    server.daemon_threads = True
    return server
