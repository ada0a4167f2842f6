#!/usr/bin/env bash
# Device call 10 of docs/perf.md v24: cache hints on the forward's output stores (proto/stores.cu).
#   bash docs/bench-tails/v24/device10.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v24/proto/probe_stores.py .gpu/stores.so "$out/stores.json" \
  > "$out/stores.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/stores.log"
