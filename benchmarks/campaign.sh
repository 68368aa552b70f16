#!/bin/bash
# The measurement campaign behind benchmarks/RESULTS.md: the loopback goal
# table (3 repeats at 2 and 4 ranks, plus one unpinned), then the shaped
# 1 Gbit/s 64 MiB table (3 repeats uncompressed, one each with compression
# on Gaussian and real data). About 27 minutes on 2 cores. Needs root for
# the shaped part.
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
for i in 1 2 3; do
  stamp "shaped never run $i"
  python3 -m zipccl bench collectives --world-size 4 --link-rate 1gbit --ops all --dtype bfloat16 --sizes 64M --compress never --rounds 5 --csv $R/shaped-1gbit-4ranks-bf16-64M-never-run$i.csv 2>&1 | grep -v "^bench \["
done
for data in gaussian real; do
  stamp "shaped auto $data"
  python3 -m zipccl bench collectives --world-size 4 --link-rate 1gbit --ops all --dtype bfloat16 --sizes 64M --compress auto --data $data --rounds 5 --csv $R/shaped-1gbit-4ranks-bf16-64M-auto-$data.csv 2>&1 | grep -v "^bench \["
done
stamp "done"
