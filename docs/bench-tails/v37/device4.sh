#!/usr/bin/env bash
# Device call 4 of docs/perf.md v37: every GPU test on this round's final artifacts
# (.gpu/art41.tar.xz).
#   bash docs/bench-tails/v37/device4.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art41 "$out"
timeout 560 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" test 2>&1 | tail -n 30
