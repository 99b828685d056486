#!/bin/sh
# Reports what a model call spent as usage lines, then stores the call as a
# step (whose own line adds a little more), reports more usage on its own,
# and asks for a retry; the next attempt does the call again although its
# request carries the step, and finishes.
read -r request
case "$request" in
*'"steps":{"plan-1":"tides"}'*)
	echo '@jetrun {"usage":{"inputTokens":7,"model":"m1"}}'
	echo '@jetrun {"step":{"name":"plan-1","output":"tides"}}'
	echo '@jetrun {"result":{"summary":"done"}}' ;;
*)
	echo '@jetrun {"usage":{"inputTokens":30,"model":"m1"}}'
	echo '@jetrun {"usage":{"inputTokens":10,"model":"m1"}}'
	echo '@jetrun {"step":{"name":"plan-1","output":"tides","usage":{"outputTokens":2,"model":"m1"}}}'
	echo '@jetrun {"usage":{"inputTokens":5,"model":"m1"}}'
	echo '@jetrun {"milestone":{"name":"planned"}}'
	echo '@jetrun {"error":"model overloaded","retryable":true}' ;;
esac
