#!/bin/sh
# Three steps, each done only when the request does not carry it stored;
# the result's output is the request, so a test reads what it carried.
read -r request
for step in one two three; do
	case "$request" in
	*"\"$step\":"*) ;;
	*) echo "@jetrun {\"step\":{\"name\":\"$step\",\"output\":\"$step done\",\"usage\":{\"outputTokens\":5}}}" ;;
	esac
done
echo "@jetrun {\"result\":{\"summary\":\"three steps\",\"output\":$request}}"
