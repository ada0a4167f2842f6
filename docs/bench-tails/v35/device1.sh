#!/usr/bin/env bash
# Device call 1 of docs/perf.md v35: float32 merge forwards by thread-block clusters
# (proto/pair35.cu, built here into .gpu/v35/pair35.so) against the final v33 artifacts
# (.gpu/art33.tar.xz), proto/probe35.py.
#   bash docs/bench-tails/v35/device1.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art33 "$out"
timeout 500 python3 docs/bench-tails/v35/proto/probe35.py "$PSA_TVM_ARTIFACTS" "$out/call1.json" \
  1 .gpu/v35/pair35.so > "$out/call1.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call1.log"
tail -5 "$out/call1.log"
