#!/usr/bin/env bash
# Device call 4 of docs/perf.md v29: band backwards (gen_bwd29.py CALL 4) and the float32 shifted backward (gen_shift29.py CALL 4) by call size
# against v28's artifacts (.gpu/art28.tar.xz).
#   bash docs/bench-tails/v29/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts28 && tar -xJf .gpu/art28.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts28
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 400 python3 docs/bench-tails/v29/proto/probe29.py .artifacts28 "$out/call4.json" 4 .gpu/bwd29c4.so .gpu/shift29c4.so \
  > "$out/call4.log" 2>&1
echo "probe rc=$?"
grep -E "^bwd|shipped" "$out/call4.log" | paste - - | awk '{print $1,$2,$3,$4,$5,$(NF-1)}'
