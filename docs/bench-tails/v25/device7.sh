#!/usr/bin/env bash
# Device call 7 of docs/perf.md v25: the persistent band forward staged by cp.async (proto/pband.cu)
# beside pblock.cu, the shipped kernel and the copy.
#   bash docs/bench-tails/v25/device7.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 480 python3 docs/bench-tails/v25/proto/probe_pband.py .gpu/pband.so .gpu/pblock.so \
  "$out/pband.json" > "$out/pband.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/pband.log"
