#!/bin/sh
read -r request
echo '@jetrun {"reserve":{"inputTokens":-5}}'
read -r answer
echo '@jetrun {"result":{"summary":"not reached"}}'
