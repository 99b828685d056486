"""An exec child that makes model calls to a (fake) provider through a
provider limit shared by the fleet: before each call it reserves on the
limit and waits for the answer on stdin; after it, it reports the call's
usage. Each call tells the provider when its reservation waited (Unix
ms), so a test can tell when demand exceeded the limit. A 429 is reported as a retryable error with the provider's delay,
which pauses the limit for every worker. The usage line says when the
provider answered the call (answeredAtMs): a grant answered before a
window's roll counts in that window, however late the line is read. Standard library only."""
import json
import sys
import time
import urllib.error
import urllib.request


def line(obj):
    sys.stdout.write("@jetrun " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    request = json.loads(sys.stdin.readline())
    inp = request["input"]
    tenant = inp.get("tenant", "")
    for i in range(inp["calls"]):
        waited = int(time.time() * 1000)
        line({"reserve": {"inputTokens": inp["estimate"], "limit": inp["limit"]}})
        answer = json.loads(sys.stdin.readline())["reserved"]
        granted = int(time.time() * 1000)
        if not answer["ok"]:
            line({"error": "reserve refused: " + answer.get("error", ""), "retryable": False})
            return
        used = inp["estimate"] // 2 + (i * 7) % (inp["estimate"] // 2 + 1)
        url = "%s?tokens=%d&tenant=%s&run=%s&waitFrom=%d&waitTo=%d" % (
            inp["url"], used, tenant, request["runId"], waited, granted)
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=30) as r:
                r.read()
            answered = int(time.time() * 1000)
        except urllib.error.HTTPError as e:
            if e.code != 429:
                raise
            ms = int(e.headers.get("retry-after-ms") or 1000 * int(e.headers.get("Retry-After") or 1))
            line({"error": "provider: 429", "retryable": True, "retryAfterMs": ms})
            return
        line({"usage": {"inputTokens": used, "model": "fake", "answeredAtMs": answered}})
    line({"result": {"summary": "called %d times" % inp["calls"]}})


main()
