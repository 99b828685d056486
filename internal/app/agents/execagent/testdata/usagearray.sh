#!/bin/sh
# Stores a step that made three model calls, their usage on the step line
# itself (one write: no usage line to hold for the step line after it),
# and finishes.
read -r request
echo '@jetrun {"step":{"name":"plan-1","output":"tides","usage":[{"inputTokens":30,"model":"m1"},{"inputTokens":10,"outputTokens":4,"model":"m1"},{"outputTokens":2,"costMicros":9,"model":"m2"}]}}'
echo '@jetrun {"result":{"summary":"done"}}'
