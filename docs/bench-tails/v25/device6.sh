#!/usr/bin/env bash
# Device call 6 of docs/perf.md v25: the persistent block forward (proto/pblock.cu)
# beside tma.cu's block kernels, the shipped kernel and the copy.
#   bash docs/bench-tails/v25/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 480 python3 docs/bench-tails/v25/proto/probe_pblock.py .gpu/pblock.so .gpu/tma.so \
  "$out/pblock.json" > "$out/pblock.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/pblock.log"
