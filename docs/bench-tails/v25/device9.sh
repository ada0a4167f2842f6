#!/usr/bin/env bash
# Prepared as device call 9 of docs/perf.md v25 and NOT RUN (the session's device time ran
# out): prband.cu's 256/384-thread variants at the rows where call 8 spilled or lost.
#   bash docs/bench-tails/v25/device9.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 100 python3 docs/bench-tails/v25/proto/probe_prband9.py .gpu/prband.so \
  "$out/prband9.json" > "$out/prband9.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/prband9.log"
