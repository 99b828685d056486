#!/bin/sh
# Prints $1 plain lines full of quotes (JSON-looking text, no event marker).
read -r request
i=1
while [ "$i" -le "$1" ]; do
	echo "{\"chunk\": \"token $i \"}"
	i=$((i + 1))
done
