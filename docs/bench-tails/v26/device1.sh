#!/usr/bin/env bash
# Device call 1 of docs/perf.md v26: v25's prepared call 9 and the band backward prototype.
#   bash docs/bench-tails/v26/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v26/proto/probe_call1.py .gpu/prband.so .gpu/prbwd.so \
  "$out/call1.json" > "$out/call1.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/call1.log"
