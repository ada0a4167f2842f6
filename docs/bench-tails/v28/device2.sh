#!/usr/bin/env bash
# Device call 2 of docs/perf.md v28: the call-size sweep of call 1's best band forwards
# at N = 1065-1080 (gen_band28.py OUT 2, built here into .gpu/band28c2.so) against the
# shipped artifacts (.gpu/art27.tar.xz, v27's).
#   bash docs/bench-tails/v28/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts27 && tar -xJf .gpu/art27.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts27
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 450 python3 docs/bench-tails/v28/proto/probe28.py .artifacts27 .gpu/band28c2.so \
  "$out/band28.json" 2 > "$out/band28.log" 2>&1
echo "probe rc=$?"
cat "$out/gpu.txt"
grep -v -i warn "$out/band28.log"
