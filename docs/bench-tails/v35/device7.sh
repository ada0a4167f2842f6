#!/usr/bin/env bash
# Device call 7 of docs/perf.md v35: call 3's float32 8-row band forwards again, beside the same
# kernels with their stage loads hinted to bring whole lines into L2 (ld.global.nc.L2::128B /
# ::256B; proto/gen_band35.py, built here into .gpu/v35/band35h.so), against the final v33
# artifacts (.gpu/art35.tar.xz holds the same GPU builds), proto/probe35.py.
#   bash docs/bench-tails/v35/device7.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art35 "$out"
timeout 500 python3 docs/bench-tails/v35/proto/probe35.py "$PSA_TVM_ARTIFACTS" "$out/call7.json" \
  3 .gpu/v35/band35h.so > "$out/call7.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call7.log"
