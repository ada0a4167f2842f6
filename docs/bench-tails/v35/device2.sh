#!/usr/bin/env bash
# Device call 2 of docs/perf.md v35: float32 cluster forwards that transpose on the way in
# (proto/scatter35.cu, built here into .gpu/v35/scatter35.so) against the final v33 artifacts
# (.gpu/art33.tar.xz), proto/probe35.py.
#   bash docs/bench-tails/v35/device2.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art33 "$out"
timeout 500 python3 docs/bench-tails/v35/proto/probe35.py "$PSA_TVM_ARTIFACTS" "$out/call2.json" \
  1 .gpu/v35/scatter35.so > "$out/call2.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call2.log"
tail -5 "$out/call2.log"
