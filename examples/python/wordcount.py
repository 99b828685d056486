#!/usr/bin/env python3
"""A jetrun child in Python, run through the exec agent type.

    JETRUN_EXEC_AGENTS="wordcount=python3 $PWD/examples/python/wordcount.py" ./bin/child-worker

stdin's first line is the run as JSON; every stdout line is a chunk, except
lines starting with "@jetrun ", which carry events (docs/protocol.md, "Write
a child in another language"). Input: {"text": "..."}. Each line of the text
is counted as a step (a chunk and a milestone); the result is the total.
Errors go to stderr with a non-zero exit: the run ends "error" with them.
"""

import json
import sys


def event(ev):
    print("@jetrun " + json.dumps(ev), flush=True)


def main():
    req = json.loads(sys.stdin.readline())  # not sys.stdin.read(): stdin stays open for signals
    text = (req.get("input") or {}).get("text")
    if not isinstance(text, str):
        print('input must be {"text": "..."}', file=sys.stderr)
        sys.exit(2)
    lines = text.splitlines()
    total = 0
    for i, line in enumerate(lines, 1):
        n = len(line.split())
        total += n
        print("line %d: %d words" % (i, n), flush=True)
        event({"progress": {"fraction": i / len(lines), "phase": "counting"}})
        event({"milestone": {"name": "line-%d" % i, "data": {"words": n}}})
    event({"result": {"summary": "%d words in %d lines" % (total, len(lines)),
                      "output": {"words": total, "lines": len(lines)}}})


if __name__ == "__main__":
    main()
