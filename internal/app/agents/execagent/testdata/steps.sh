#!/bin/sh
# A child speaking the exec contract: the request on stdin's first line,
# plain output lines as chunks, "@jetrun " event lines.
read -r request
echo "request: $request" >&2
echo "hello from $JETRUN_RUN_ID"
echo '@jetrun {"progress":{"fraction":0.5,"phase":"half"}}'
echo '@jetrun {"milestone":{"name":"halfway","data":{"n":1}}}'
echo "second line"
echo '@jetrun {"result":{"summary":"all done","output":{"ok":true}}}'
