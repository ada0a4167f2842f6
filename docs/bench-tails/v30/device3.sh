#!/usr/bin/env bash
# Device call 3 of docs/perf.md v30: the copy floor against the byte count, and the shipped
# float32 37x29 forward across batch 10-20 (proto/copy_sweep30.py).
#   bash docs/bench-tails/v30/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts30 && tar -xJf .gpu/art30.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts30 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v30/proto/copy_sweep30.py .artifacts30 "$out/call3.json" \
  2>&1 | grep -v Warn | tee "$out/call3.log"
