#!/bin/bash
# Loopback, every op, bf16 and fp32, CMA on and off alternated.
export PATH=/tmp/civenv/bin:$PATH PYTHONPATH=/work/main/python
cd /work/main
for pass in a b; do
for v in 1 0; do
  echo "== pass $pass ZIPCCL_CMA=$v $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  ZIPCCL_CMA=$v python -m zipccl bench collectives --no-netns --world-size 4 \
    --ops all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,send_recv --dtype bfloat16,float32 \
    --sizes 1M,4M,16M,64M,256M --backends gloo,zipccl --rounds 5 --csv /tmp/s10/lb-$pass-cma$v.csv --no-plot 2>&1 | grep -E "speedup|MiB|load" 
done
done
echo done $(date -u +%H:%M:%S)
