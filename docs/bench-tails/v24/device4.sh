#!/usr/bin/env bash
# Device call 4 of docs/perf.md v24: probe_sectors.py (rows of whole 32-byte sectors or not; the
# shifted kernel forced in place of the tiled one).
#   bash docs/bench-tails/v24/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v24/probe_sectors.py "$out/sectors.json" > "$out/sectors.log" 2>&1
echo "probe rc=$?"
grep -v Warn "$out/sectors.log"
