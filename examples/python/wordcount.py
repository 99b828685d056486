#!/usr/bin/env python3
"""A jetrun child in Python, run through the exec agent type, on the jetrun
library (sdk/python).

    JETRUN_EXEC_AGENTS="wordcount=python3 $PWD/examples/python/wordcount.py" ./bin/child-worker

jetrun.serve reads the run from stdin's first line and writes events as
"@jetrun " lines; every other stdout line is a chunk (docs/protocol.md,
"Write a child in another language"). Input: {"text": "..."}. Each line of
the text is counted as a step (a chunk and a milestone); the result is the
total. Errors go to stderr with a non-zero exit: the run ends "error" with
them.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import jetrun  # noqa: E402


def handle(run):
    text = (run.input or {}).get("text") if isinstance(run.input, dict) else None
    if not isinstance(text, str):
        print('input must be {"text": "..."}', file=sys.stderr)
        sys.exit(2)
    lines = text.splitlines()
    total = 0
    for i, line in enumerate(lines, 1):
        n = len(line.split())
        total += n
        run.print("line %d: %d words" % (i, n))
        run.progress(i / len(lines), "counting")
        run.milestone("line-%d" % i, {"words": n})
    return jetrun.Result("%d words in %d lines" % (total, len(lines)), {"words": total, "lines": len(lines)})


if __name__ == "__main__":
    jetrun.serve(handle)
