"""jetrun for Python, standard library only.

The child side (a run's code, served through the exec or http agent type):
Run, serve, http_server, Result, RetryableError, CallError, Reserved, Stopped.
The caller side (over the HTTP API): Client, RunFailed, APIError.
See docs/protocol.md and sdk/python/README.md.
"""

from .child import (MARKER, CallError, Handler, Reserved, Result, RetryableError, Run, Stopped, finish,
                    http_server, serve)
from .client import APIError, Client, Event, RunFailed

__all__ = ["MARKER", "APIError", "CallError", "Client", "Event", "Handler", "Reserved", "Result", "RetryableError", "Run",
           "RunFailed", "Stopped", "finish", "http_server", "serve"]
