#!/usr/bin/env bash
# Device call 4 of docs/perf.md v28 (not run: no device; call 5 ran its probe): 16-row band forwards at 4 CTAs an SM for batch 64
# at 37x29 and the 32-row band at N 1073-1080 (gen_band28.py OUT 4, built here into
# .gpu/band28c4.so) against the
# shipped artifacts (.gpu/art27.tar.xz, v27's).
#   bash docs/bench-tails/v28/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts27 && tar -xJf .gpu/art27.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts27
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 450 python3 docs/bench-tails/v28/proto/probe28.py .artifacts27 .gpu/band28c4.so \
  "$out/band28.json" 4 > "$out/band28.log" 2>&1
echo "probe rc=$?"
cat "$out/gpu.txt"
grep -v -i warn "$out/band28.log"
