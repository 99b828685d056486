#!/bin/sh
# A jetrun child in shell, run through the exec agent type:
#
#   JETRUN_EXEC_AGENTS="countdown=$PWD/examples/shell/countdown.sh" ./bin/child-worker
#
# stdin's first line is the run as JSON ({"runId", "attempt", "input", ...});
# every stdout line is a chunk, except lines starting with "@jetrun ", which
# carry events (docs/protocol.md, "Write a child in another language").
# Input: {"from": 5, "delay": 0.2}.
read -r request
from=$(printf '%s' "$request" | sed -n 's/.*"from": *\([0-9][0-9]*\).*/\1/p')
delay=$(printf '%s' "$request" | sed -n 's/.*"delay": *\([0-9.][0-9.]*\).*/\1/p')
from=${from:-5}
delay=${delay:-0.2}
echo "countdown pid $$ from $from"
i=$from
while [ "$i" -gt 0 ]; do
	sleep "$delay"
	echo "T-minus $i"
	echo "@jetrun {\"progress\":{\"fraction\":$(awk "BEGIN{print ($from-$i+1)/$from}"),\"phase\":\"counting\"}}"
	i=$((i - 1))
done
echo "@jetrun {\"milestone\":{\"name\":\"liftoff\"}}"
echo "@jetrun {\"result\":{\"summary\":\"liftoff after $from\",\"output\":{\"from\":$from}}}"
