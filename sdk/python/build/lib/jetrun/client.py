"""The caller side: jetrun's HTTP API (README, "HTTP API"; docs/protocol.md)
from Python, standard library only.

    client = jetrun.Client("http://127.0.0.1:8080")
    client.dispatch("summarize", {"topic": "tides"}, run_id="r1")
    for ev in client.stream("r1"):        # server-sent events, resumed after a drop
        print(ev.kind, ev.data)
    row = client.await_run("r1")          # the completed run, or RunFailed
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException, HTTPResponse
from typing import Any, Dict, Iterator, List, Optional, cast

JSON = Any


class APIError(Exception):
    """The API refused a request: status is the HTTP status, code and
    message its error body's."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__("%d %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message


class RunFailed(Exception):
    """A run ended without completing: run is its row (status error,
    aborted or interrupted; "error", "retryable")."""

    def __init__(self, run: Dict[str, Any]) -> None:
        super().__init__("run %s ended %s: %s" % (run.get("runId") or run.get("id"), run.get("status"),
                                                  run.get("error", "")))
        self.run = run
        self.status: str = run.get("status", "")
        self.retryable: bool = bool(run.get("retryable"))


class Event:
    """One server-sent event of a run's stream: id (the stream sequence,
    "<seq>.<part>" inside a coalesced chunk event; None for caught-up and
    end), kind (status, chunk, progress, milestone, signal, step, call,
    reply, caught-up, end, ...) and data (the decoded JSON)."""

    def __init__(self, id: Optional[str], kind: str, data: JSON) -> None:
        self.id = id
        self.kind = kind
        self.data = data

    def __repr__(self) -> str:
        return "Event(%r, %r, %r)" % (self.id, self.kind, self.data)


class Client:
    """A client of one jetrun HTTP API (a parent-worker's JETRUN_HTTP_ADDR)."""

    def __init__(self, url: str = "http://127.0.0.1:8080", token: Optional[str] = None,
                 timeout: float = 30.0) -> None:
        """token is sent as "Authorization: Bearer <token>" when the API
        asks for one; timeout bounds each request (and each silence of a
        stream, which the server breaks every 15 s)."""
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    # Runs.

    def dispatch(self, agent_type: str, input: JSON, run_id: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        """Dispatches a run (POST /v1/runs) and returns its row. The same
        run_id again returns the existing run: nothing runs twice. fields
        are the dispatch's other fields by their wire names (detached,
        budget, concurrencyKey, strategy, parent, ...)."""
        body = dict(fields, agentType=agent_type, input=input)
        if run_id is not None:
            body["runId"] = run_id
        return self._obj("POST", "/v1/runs", body)

    def run(self, agent_type: str, input: JSON, run_id: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        """Dispatches a run and waits for it (POST /v1/runs?wait=true):
        returns {"runId", "status", "summary", "output"} once it completed,
        or raises RunFailed."""
        body = dict(fields, agentType=agent_type, input=input)
        if run_id is not None:
            body["runId"] = run_id
        out: Dict[str, Any] = self._json("POST", "/v1/runs?wait=true", body, timeout=None)
        if not out.get("ok"):
            raise RunFailed(out)
        return out

    def get(self, run_id: str) -> Dict[str, Any]:
        """The run's row (GET /v1/runs/{id}): status, summary, output,
        error, usage, milestones, ... plus "live" and "final"."""
        return self._obj("GET", "/v1/runs/" + _seg(run_id))

    def await_run(self, run_id: str) -> Dict[str, Any]:
        """Waits until the run ended (following its events) and returns its
        row when it completed; raises RunFailed otherwise. (Python's await
        is a keyword: this is the API's await.)"""
        for _ in self.stream(run_id):
            pass
        row = self.get(run_id)
        if row.get("status") != "completed":
            raise RunFailed(row)
        return row

    def stream(self, run_id: str, after: Optional[str] = None, follow: bool = True,
               last_event_id: Optional[str] = None) -> Iterator[Event]:
        """Yields the run's events (GET /v1/runs/{id}/events, server-sent
        events): its history, then live ones until the run ended. A dropped
        connection is resumed with Last-Event-ID after the last event
        yielded: no gap, no duplicate. last_event_id (an Event's id) or
        after (a stream sequence) starts after that event; follow=False
        stops after the history. The stream's own markers come as events
        "caught-up" and "end" ("history-end" without follow)."""
        last = last_event_id
        q = {"follow": "false"} if not follow else {}
        if after is not None and last is None:
            q["after"] = str(after)
        path = "/v1/runs/%s/events" % _seg(run_id)
        if q:
            path += "?" + urllib.parse.urlencode(q)
        away: Optional[float] = None  # since when the server does not answer
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = last
            try:
                resp = self._open("GET", path, None, headers, self.timeout)
            except (OSError, HTTPException):
                away = away if away is not None else time.monotonic()
                if time.monotonic() - away > self.timeout:
                    raise
                time.sleep(0.2)  # the server is away for now: try again
                continue
            away = None
            ended = False
            try:
                for ev in _sse(resp):
                    if ev.id is not None:
                        last = ev.id
                    yield ev
                    if ev.kind in ("end", "history-end"):
                        ended = True
                        return
            except (OSError, HTTPException, socket.timeout):
                pass  # dropped: resume after the last event
            finally:
                resp.close()
            if ended:
                return

    def cancel(self, run_id: str, reason: Optional[str] = None) -> Dict[str, Any]:
        """Cancels the run and every run under it (POST /v1/runs/{id}/cancel);
        returns its row."""
        body = {"reason": reason} if reason else {}
        return self._obj("POST", "/v1/runs/%s/cancel" % _seg(run_id), body)

    def signal(self, run_id: str, name: str, payload: JSON = None) -> Dict[str, Any]:
        """Sends a signal to the run (POST /v1/runs/{id}/signals/{name})."""
        return self._obj("POST", "/v1/runs/%s/signals/%s" % (_seg(run_id), _seg(name)),
                          {} if payload is None else payload)

    def calls(self, run_id: str) -> List[Dict[str, Any]]:
        """The run's calls to its caller, each with its reply if any
        (GET /v1/runs/{id}/calls)."""
        out = self._json("GET", "/v1/runs/%s/calls" % _seg(run_id))
        return list(out.get("calls") or []) if isinstance(out, dict) else list(out or [])

    def reply(self, run_id: str, seq: int, output: JSON = None, error: Optional[str] = None) -> Dict[str, Any]:
        """Answers call seq of the run (POST /v1/runs/{id}/calls/{seq}/reply)."""
        body = {"error": error} if error else {"output": output}
        return self._obj("POST", "/v1/runs/%s/calls/%d/reply" % (_seg(run_id), seq), body)

    # Asks, re-runs and diffs (issue 37).

    def asks(self, status: str = "open", **filters: str) -> List[Dict[str, Any]]:
        """What runs ask people (GET /v1/asks?status=open)."""
        q = urllib.parse.urlencode(dict(filters, status=status))
        return list(self._json("GET", "/v1/asks?" + q).get("asks") or [])

    def answer(self, ask_id: str, value: JSON, digest: str, by: Optional[str] = None) -> Dict[str, Any]:
        """Answers an ask (POST /v1/asks/{id}:answer) with the digest of the
        payload it answers (the ask's "digest"): an ask whose payload changed
        since is refused (409), as is a second answer. by names who answers
        (else the API's token name). Returns the answered ask."""
        body: Dict[str, Any] = {"digest": digest, "value": value}
        if by is not None:
            body["by"] = by
        return self._obj("POST", "/v1/asks/%s:answer" % _seg(ask_id), body)

    def rerun(self, run_id: str, from_step: str, input: JSON = None, steps: Optional[Dict[str, JSON]] = None,
              new_run_id: Optional[str] = None, budget: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
        """Starts a new run from a step of run_id (POST /v1/runs/{id}:rerun):
        the steps before from_step are given back stored; input and steps
        (outputs by name) override. Returns the new run's row."""
        body: Dict[str, Any] = {"fromStep": from_step}
        if input is not None:
            body["input"] = input
        if steps is not None:
            body["steps"] = steps
        if new_run_id is not None:
            body["runId"] = new_run_id
        if budget is not None:
            body["budget"] = budget
        return self._obj("POST", "/v1/runs/%s:rerun" % _seg(run_id), body)

    def diff(self, a: str, b: str) -> Dict[str, Any]:
        """Compares two runs step by step (GET /v1/runs/{a}/diff/{b}): each
        step's verdict (equal, changed, ...) with both sides' output and
        usage, and the totals."""
        return self._obj("GET", "/v1/runs/%s/diff/%s" % (_seg(a), _seg(b)))

    # Plumbing.

    def _obj(self, method: str, path: str, body: JSON = None) -> Dict[str, Any]:
        """_json for the answers that are objects."""
        return cast(Dict[str, Any], self._json(method, path, body))

    def _json(self, method: str, path: str, body: JSON = None, timeout: Optional[float] = -1.0) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if method != "GET":
            headers["Content-Type"] = "application/json"  # writes take JSON only, even without a body
            data = json.dumps({} if body is None else body).encode()
        resp = self._open(method, path, data, headers, self.timeout if timeout == -1.0 else timeout)
        try:
            raw = resp.read()
        finally:
            resp.close()
        return json.loads(raw) if raw.strip() else None

    def _open(self, method: str, path: str, data: Optional[bytes], headers: Dict[str, str],
              timeout: Optional[float]) -> HTTPResponse:
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            return cast(HTTPResponse, urllib.request.urlopen(req, timeout=timeout))
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
                code, msg = err.get("code", ""), err.get("error", "")
            except ValueError:
                code, msg = "", raw.decode(errors="replace").strip()
            raise APIError(e.code, code, msg) from None


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _sse(resp: HTTPResponse) -> Iterator[Event]:
    """Parses server-sent events from resp."""
    id_: Optional[str] = None
    kind = "message"
    data: List[str] = []
    while True:
        raw = resp.readline()
        if not raw:
            return
        line = raw.decode().rstrip("\r\n")
        if line == "":
            if data:
                text = "\n".join(data)
                try:
                    value: JSON = json.loads(text)
                except ValueError:
                    value = text
                yield Event(id_, kind, value)
            id_, kind, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value_s = line.partition(":")
        value_s = value_s[1:] if value_s.startswith(" ") else value_s
        if field == "id":
            id_ = value_s
        elif field == "event":
            kind = value_s
        elif field == "data":
            data.append(value_s)
