#!/usr/bin/env bash
# Device call 8 of docs/perf.md v25: the persistent register-staged band forward (proto/prband.cu)
# beside pblock.cu, the shipped kernel and the copy.
#   bash docs/bench-tails/v25/device8.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 480 python3 docs/bench-tails/v25/proto/probe_prband.py .gpu/prband.so .gpu/pblock.so \
  "$out/prband.json" > "$out/prband.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/prband.log"
