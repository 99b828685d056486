#!/bin/sh
read -r request
echo "asking"
echo '@jetrun {"call":{"name":"ask","input":{"q":"colour?"}}}'
read -r reply
echo "@jetrun {\"result\":{\"summary\":\"asked\",\"output\":$reply}}"
