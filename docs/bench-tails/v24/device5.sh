#!/usr/bin/env bash
# Device call 5 of docs/perf.md v24: probe_shifted.py over the shifted forward candidates of
# nh 4 (.tune24s: 16-bit, .tune24f: float32), forced in place of the tiled kernel.
#   bash docs/bench-tails/v24/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts .tune24s .tune24f && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/tune24sf.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 400 python3 docs/bench-tails/v24/probe_shifted.py "$out/shifted.json" .tune24s .tune24f \
  > "$out/shifted.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/shifted.log"
