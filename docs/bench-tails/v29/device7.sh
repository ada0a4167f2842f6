#!/usr/bin/env bash
# Device call 7 of docs/perf.md v29: a second benchmark run of every shape (three placements)
# on the final artifacts, on the GPU that call 5 and 6 ran on, to see which rows repeat.
#   bash docs/bench-tails/v29/device7.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts29 && tar -xJf .gpu/art29.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts29
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 260 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > /tmp/all.log 2>&1
echo "bench rc=$?"
rm -f "$out"/all/*.png "$out"/all/bench.partial.jsonl
python3 scripts/bench_runs.py "$out/all" | tail -n 1
