#!/bin/sh
# Stores a step (with what it spent) and asks for a retry; the next
# attempt finds the step in its request and finishes.
read -r request
case "$request" in
*'"steps":{"plan-1":"tides"}'*)
	echo '@jetrun {"result":{"summary":"reused the plan"}}' ;;
*)
	echo '@jetrun {"step":{"name":"plan-1","output":"tides","usage":{"inputTokens":40,"outputTokens":2,"model":"m1"}}}'
	echo '@jetrun {"error":"model overloaded","retryable":true}' ;;
esac
