#!/usr/bin/env bash
# Device call 1 of docs/perf.md v24: the flattened-tile prototype against the row tiles, the
# shipped kernels and the copy (docs/bench-tails/v24/proto/).
#   bash docs/bench-tails/v24/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 400 python3 docs/bench-tails/v24/proto/probe_flat.py .gpu/proto.so "$out/flat.json" \
  > "$out/flat.log" 2>&1
echo "probe rc=$?"
cat "$out/flat.log" | tail -n 300
