#!/usr/bin/env bash
# Device call 2 of docs/perf.md v27: this round's artifacts (the test and YOLO presets plus the
# attention builds, with the three 37x29 band forwards; built here into .gpu/art27.tar.xz)
# against v26's (.gpu/art26full.tar.xz) at the call sizes that split them (probe27_lib.py),
# then every GPU test, the native library and host time (scripts/gpu_session.sh).
#   bash docs/bench-tails/v27/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts .artifacts27 && tar -xJf .gpu/art26full.tar.xz && tar -xJf .gpu/art27.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts27
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 120 python3 docs/bench-tails/v27/proto/probe27_lib.py .artifacts .artifacts27 \
  "$out/band_lib.json" > "$out/band_lib.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/band_lib.log"
bash scripts/gpu_session.sh .artifacts27 "$out" test native host 2>&1 | tail -n 30
