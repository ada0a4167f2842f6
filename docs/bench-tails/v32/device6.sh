#!/usr/bin/env bash
# Device call 6 of docs/perf.md v32: every GPU test on this round's artifacts (v30's GPU builds,
# v32's CPU libraries and native library: joined 16-bit forward loads, the prefetch threshold's
# error).
#   bash docs/bench-tails/v32/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts32 && tar -xJf .gpu/art32.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts32
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 575 bash scripts/gpu_session.sh .artifacts32 "$out/session" test 2>&1 | tail -n 30
