#!/usr/bin/env bash
# Device call 3 of docs/perf.md v29: shifted backwards with warp-whole tiles (proto/gen_shift29.py CALL 3 -> .gpu/shift29c3.so) and call 1's band backwards
# against v28's artifacts (.gpu/art28.tar.xz).
#   bash docs/bench-tails/v29/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts28 && tar -xJf .gpu/art28.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts28
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 400 python3 docs/bench-tails/v29/proto/probe29.py .artifacts28 "$out/shift29.json" 2 .gpu/shift29c3.so .gpu/bwd29.so \
  > "$out/shift29.log" 2>&1
echo "probe rc=$?"
grep -E "^bwd|shipped" "$out/shift29.log" | paste - - | awk '{print $1,$2,$3,$4,$5,$(NF-1)}'
