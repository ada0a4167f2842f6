#!/usr/bin/env bash
# Device call 5 of docs/perf.md v30: every GPU test, the native library (C++ example,
# compute-sanitizer) and host time per call on this round's artifacts (scripts/gpu_session.sh).
#   bash docs/bench-tails/v30/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts30 && tar -xJf .gpu/art30.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts30
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 560 bash scripts/gpu_session.sh .artifacts30 "$out/session" test native host \
  2>&1 | tail -n 30
