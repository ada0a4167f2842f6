#!/usr/bin/env bash
# Device call 5 of docs/perf.md v35: the regenerated native library (.gpu/art35.tar.xz) through
# the C++ example on CUDA and the CPU, compute-sanitizer memcheck and racecheck, and host time
# per call against torch's copy_ (gpu_session.sh's native and host steps).
#   bash docs/bench-tails/v35/device5.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art35 "$out"
timeout 300 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" native host 2>&1 | tail -n 40
