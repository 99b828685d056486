#!/bin/sh
echo "some output"
echo "warming up" >&2
echo "disk full: cannot write /tmp/x" >&2
exit 3
