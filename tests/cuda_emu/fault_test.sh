#!/usr/bin/env bash
# Proves that the emulation tests can fail: each injected fault (a wrong lane
# in a shuffle, a flipped ballot bit, __syncthreads doing nothing) must make
# emu_test exit non-zero. Usage: fault_test.sh EMU_TEST GOLDEN [QUANT_GOLDEN]
set -u
emu=$1
golden=$2
quant=()
if [ $# -ge 3 ]; then quant=(--quant "$3"); fi
pass=0
fail=0
for fault in shfl_up shfl shfl_xor ballot nosync; do
  out=$("$emu" --quick --fault "$fault" "${quant[@]}" "$golden" 2>&1)
  rc=$?
  summary=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$|VIOLATION' | tail -1)
  if [ "$rc" -ne 0 ]; then
    echo "fault $fault: caught (exit $rc: $summary)"
    pass=$((pass + 1))
  else
    echo "fault $fault: NOT caught: the emulation tests passed with a broken intrinsic"
    fail=$((fail + 1))
  fi
done
echo "faults: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
