#!/usr/bin/env bash
# Device call 4 of docs/perf.md v36: 16-bit band forwards and backwards at 6-head 20x20
# (proto/gen_band36.py OUT 4, built here into .gpu/v36c4/band36_float16.so) against this
# round's artifacts (.gpu/art37.tar.xz) at batch 16-64, proto/probe36.py's call 4.
#   bash docs/bench-tails/v36/device4.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v36/setup.sh art37 "$out"
timeout 300 python3 docs/bench-tails/v36/proto/probe36.py "$PSA_TVM_ARTIFACTS" "$out/call4.json" \
  .gpu/v36c4 4 > "$out/call4.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call4.log"
