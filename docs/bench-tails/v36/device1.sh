#!/usr/bin/env bash
# Device call 1 of docs/perf.md v36: the band forwards of proto/gen_band36.py (built here into
# .gpu/v36/band36_{float32,float16}.so) against v35's final artifacts (.gpu/art36.tar.xz) at
# float32 20x15 around batch 16, 16-bit 6-head 20x20 at batch 64 and float32 37x29 at batch 64,
# proto/probe36.py.
#   bash docs/bench-tails/v36/device1.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v36/setup.sh art36 "$out"
timeout 470 python3 docs/bench-tails/v36/proto/probe36.py "$PSA_TVM_ARTIFACTS" "$out/call1.json" \
  .gpu/v36 > "$out/call1.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call1.log"
