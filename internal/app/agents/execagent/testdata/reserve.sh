#!/bin/sh
# Reserves 600 tokens, spends them, then asks for 600 more (the budget is
# 1,000) and returns both answers.
read -r request
echo '@jetrun {"reserve":{"inputTokens":400,"outputTokens":200}}'
read -r first
echo '@jetrun {"usage":{"inputTokens":400,"outputTokens":200,"model":"m"}}'
echo '@jetrun {"reserve":{"inputTokens":600}}'
read -r second
echo "@jetrun {\"result\":{\"summary\":\"reserved\",\"output\":[$first,$second]}}"
