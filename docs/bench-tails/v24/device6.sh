#!/usr/bin/env bash
# Device call 6 of docs/perf.md v24: the sector-exact forward prototype (proto/sector.cu).
#   bash docs/bench-tails/v24/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v24/proto/probe_sector.py .gpu/sector.so .gpu/proto.so \
  "$out/sector.json" > "$out/sector.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/sector.log"
