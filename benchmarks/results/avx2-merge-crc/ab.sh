#!/bin/bash
# A/B of huff2 decode, the build before the AVX2 merge+CRC kernels against
# the one after, alternating ROUNDS rounds (default 5) of BENCHTIME each
# (default 1s): bash ab.sh OLD NEW
# (the demo tensors as raw files: see capture.py)
set -e
old=${1:-9072537} new=${2:-7d9f1ba}
repo=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
for r in $old $new; do
  git -C "$repo" worktree add -q "$tmp/$r" "$r"
  (cd "$tmp/$r" && go test -c -o "$tmp/$r.test" ./backend/codec)
  git -C "$repo" worktree remove --force "$tmp/$r"
done
export ZIPCCL_BENCH_FILES=/tmp/demo_weights:/tmp/demo_gradients:/tmp/demo_activations
for i in $(seq ${ROUNDS:-5}); do
  for r in $old $new; do
    "$tmp/$r.test" -test.run X -test.bench 'RealFiles/.*/huff2p/decode' -test.count 1 -test.benchtime ${BENCHTIME:-1s} | grep Bench | sed "s/^/$r /"
  done
done
