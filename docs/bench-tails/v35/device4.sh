#!/usr/bin/env bash
# Device call 4 of docs/perf.md v35: every GPU test on this round's artifacts (.gpu/art35.tar.xz:
# the final v33 artifacts with the native library regenerated, its line-rule constants now
# written by the generator from psa_tvm.runtime.cpu).
#   bash docs/bench-tails/v35/device4.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art35 "$out"
timeout 590 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" test 2>&1 | tail -n 30
