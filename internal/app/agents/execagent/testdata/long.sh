#!/bin/sh
# Starts a grandchild, writes both pids to $1, and runs until stopped. With
# "stubborn" as $2 it ignores SIGTERM.
if [ "$2" = stubborn ]; then trap '' TERM; fi
sleep 1000 &
echo "$$ $!" > "$1.tmp" && mv "$1.tmp" "$1"
echo "started"
while :; do sleep 1; done
