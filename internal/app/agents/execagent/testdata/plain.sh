#!/bin/sh
read -r request
echo "one"
echo "two"
echo "the last line"
