#!/usr/bin/env bash
# Device call 3 of docs/perf.md v35: float32 8-row band forwards at 4 CTAs an SM
# (proto/gen_band35.py, built here into .gpu/v35/band35.so) against the final v33 artifacts
# (.gpu/art33.tar.xz), proto/probe35.py.
#   bash docs/bench-tails/v35/device3.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art33 "$out"
timeout 500 python3 docs/bench-tails/v35/proto/probe35.py "$PSA_TVM_ARTIFACTS" "$out/call3.json" \
  3 .gpu/v35/band35.so > "$out/call3.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call3.log"
tail -5 "$out/call3.log"
