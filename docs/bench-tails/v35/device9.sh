#!/usr/bin/env bash
# Device call 9 of docs/perf.md v35: every GPU test on this round's final artifacts
# (.gpu/art36.tar.xz).
#   bash docs/bench-tails/v35/device9.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art36 "$out"
timeout 590 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" test 2>&1 | tail -n 30
