#!/usr/bin/env bash
# Device call 6 of docs/perf.md v29: what call 5 had no time left for, on the final artifacts:
# the native library (C++ example, compute-sanitizer) and host time per call.
#   bash docs/bench-tails/v29/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts29 && tar -xJf .gpu/art29.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts29
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 400 bash scripts/gpu_session.sh .artifacts29 "$out/session" native host 2>&1 | tail -n 12
