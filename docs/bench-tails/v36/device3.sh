#!/usr/bin/env bash
# Device call 3 of docs/perf.md v36: every GPU test on this round's final artifacts
# (.gpu/art37.tar.xz).
#   bash docs/bench-tails/v36/device3.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v36/setup.sh art37 "$out"
timeout 590 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" test 2>&1 | tail -n 30
