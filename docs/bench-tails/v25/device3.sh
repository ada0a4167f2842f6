#!/usr/bin/env bash
# Device call 3 of docs/perf.md v25: the band kernels (proto/band.cu)
# beside the shipped kernel and the copy.
#   bash docs/bench-tails/v25/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 480 python3 docs/bench-tails/v25/proto/probe_band.py .gpu/band.so "$out/band.json" \
  > "$out/band.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/band.log"
