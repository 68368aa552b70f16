#!/usr/bin/env bash
# Runs every fuzzer of the codec packages for a fixed time each.
# Usage: backend/codec/fuzz.sh [fuzztime]   (default 10s)
set -euo pipefail
cd "$(dirname "$0")"
T="${1:-10s}"
targets=(
	".:FuzzDecode"
	".:FuzzDecodeSplit"
	".:FuzzDecodeTensor"
	".:FuzzRoundTrip"
	"./zip3:FuzzDecodeBlock"
	"./huff:FuzzDecodeBlock"
	"./huff:FuzzRoundTrip"
	"./internal/crc32c:FuzzUpdate"
)
for t in "${targets[@]}"; do
	pkg="${t%%:*}"
	fz="${t##*:}"
	echo "== $pkg $fz ($T)"
	go test -run='^$' -fuzz="^${fz}\$" -fuzztime="$T" "$pkg"
done
echo "all fuzzers passed"
