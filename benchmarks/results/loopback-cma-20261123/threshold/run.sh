#!/bin/bash
export PATH=/tmp/civenv/bin:$PATH PYTHONPATH=/work/main/python
cd /work/main
for pass in a b; do
for thr in 65536 262144 1048576; do
  echo "== pass $pass thr $thr $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  ZIPCCL_CMA_MIN_TMP=$thr python -m zipccl bench collectives --no-netns --world-size 4 \
    --ops all_reduce,all_to_all,broadcast,send_recv,all_gather,reduce_scatter --dtype bfloat16 \
    --sizes 256K,1M,4M --backends gloo,zipccl --rounds 5 --csv /tmp/s10/thr-$pass-$thr.csv --no-plot > /dev/null 2>&1
done
done
echo done
