#!/bin/sh
echo "fine"
echo '@jetrun {"chunk":"ok"}'
echo '@jetrun {"progress":'
sleep 1000
