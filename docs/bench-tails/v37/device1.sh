#!/usr/bin/env bash
# Device call 1 of docs/perf.md v37: the shipped kernels (.gpu/art39.tar.xz, v36's final
# artifacts) swept over batches at every grid (proto/sweep37.py), with the band forwards of
# proto/gen_band37.py (built here into .gpu/v37c1) beside them where they apply.
#   bash docs/bench-tails/v37/device1.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art39 "$out"
timeout 520 python3 docs/bench-tails/v37/proto/sweep37.py "$PSA_TVM_ARTIFACTS" "$out/call1.json" \
  .gpu/v37c1 > "$out/call1.log" 2>&1
echo "sweep rc=$?"
grep -c "NOT EXACT" "$out/call1.log"
grep "^RE " "$out/call1.log" | sort -k9 -n -r | head -60
tail -2 "$out/call1.log"
