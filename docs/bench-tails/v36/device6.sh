#!/usr/bin/env bash
# Device call 6 of docs/perf.md v36: every GPU test on this round's final artifacts
# (.gpu/art38.tar.xz).
#   bash docs/bench-tails/v36/device6.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v36/setup.sh art38 "$out"
timeout 590 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" test 2>&1 | tail -n 30
