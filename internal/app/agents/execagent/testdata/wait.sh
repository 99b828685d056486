#!/bin/sh
read -r request
echo "waiting for go"
echo '@jetrun {"wait":"go"}'
read -r signal
echo "got: $signal"
echo "@jetrun {\"result\":{\"summary\":\"signalled\",\"output\":$signal}}"
