#!/usr/bin/env bash
# Device call 2 of docs/perf.md v37: the band shapes of proto/gen_band37.py's VARIANTS_CALL2
# (built here into .gpu/v37c2) against the shipped kernels (.gpu/art39.tar.xz) at the call
# sizes of call 1's misses, three placements a case (proto/sweep37.py focus).
#   bash docs/bench-tails/v37/device2.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art39 "$out"
timeout 520 python3 docs/bench-tails/v37/proto/sweep37.py "$PSA_TVM_ARTIFACTS" "$out/call2.json" \
  .gpu/v37c2 focus > "$out/call2.log" 2>&1
echo "sweep rc=$?"
grep -c "NOT EXACT" "$out/call2.log"
tail -1 "$out/call2.log"
