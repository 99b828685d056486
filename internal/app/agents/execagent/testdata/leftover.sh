#!/bin/sh
# Exits at once, leaving a background process behind; writes its pid to $1.
sleep 1000 &  # keeps stdout open: the run must not hang on it
echo "$!" > "$1.tmp" && mv "$1.tmp" "$1"
echo "left one behind"
