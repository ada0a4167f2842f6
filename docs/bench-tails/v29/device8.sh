#!/usr/bin/env bash
# Device call 8 of docs/perf.md v29: float32 shifted forwards of every shape shifted.fits takes
# (proto/gen_shift29.py CALL 8 -> .gpu/shift29c8.so) against the final artifacts, at the
# float32 batch-16 forwards still above 1.05 and their neighbours.
#   bash docs/bench-tails/v29/device8.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts29 && tar -xJf .gpu/art29.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts29
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v29/proto/probe29.py .artifacts29 "$out/call8.json" 8 \
  .gpu/shift29c8.so > "$out/call8.log" 2>&1
echo "probe rc=$?"
grep -E "^fwd|shipped" "$out/call8.log" | paste - - | awk '{print $1,$2,$3,$4,$5,$(NF-1)}'
