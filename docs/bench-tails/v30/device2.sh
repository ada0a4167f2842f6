#!/usr/bin/env bash
# Device call 2 of docs/perf.md v30: float32 16-row band forwards at N 1065-1080 across the
# call sizes around one wave of their bands, against the shipped artifacts (.gpu/art30.tar.xz).
#   bash docs/bench-tails/v30/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts30 && tar -xJf .gpu/art30.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts30 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 400 python3 docs/bench-tails/v30/proto/probe30.py .artifacts30 "$out/call2.json" 2 \
  .gpu/band30.so > "$out/call2.log" 2>&1
echo "probe rc=$?"
grep -c False "$out/call2.log"
