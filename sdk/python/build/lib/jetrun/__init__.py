"""jetrun for Python, standard library only.

The child side (a run's code, served through the exec or http agent type):
Run, serve, http_server, Result, RetryableError, CallError, Reserved, Stopped.
The caller side (over the HTTP API): Client, RunFailed, APIError.
Sub-agents (task_<agent> and create_and_run_agent tools run as nested runs):
SubAgents, Delegate, sub_agent_tools, run_sub_agent, child_run_id.
See docs/protocol.md and sdk/python/README.md.
"""

from .child import (MARKER, CallError, Handler, Reserved, Result, RetryableError, Run, Stopped, finish,
                    http_server, serve)
from .client import APIError, Client, Event, RunFailed
from .subagents import DYNAMIC_TOOL, Delegate, SubAgents, child_run_id, run_sub_agent, sub_agent_tools

__all__ = ["MARKER", "APIError", "CallError", "Client", "Event", "Handler", "Reserved", "Result", "RetryableError", "Run",
           "RunFailed", "Stopped", "finish", "http_server", "serve",
           "DYNAMIC_TOOL", "Delegate", "SubAgents", "child_run_id", "run_sub_agent", "sub_agent_tools"]
