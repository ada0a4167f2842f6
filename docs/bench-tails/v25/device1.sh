#!/usr/bin/env bash
# Device call 1 of docs/perf.md v25: TMA bulk stores, linear per-block stores and the block
# backward (proto/tma.cu) beside v24's row kernel, the shipped kernel and the copy.
#   bash docs/bench-tails/v25/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 480 python3 docs/bench-tails/v25/proto/probe_tma.py .gpu/tma.so .gpu/stores.so \
  "$out/tma.json" > "$out/tma.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/tma.log"
