#!/usr/bin/env bash
# Device call 2 of docs/perf.md v34: the benchmark of every shape (three placements, memcpy and
# elementwise copy floors) on the final v33 artifacts.
#   bash docs/bench-tails/v34/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts33 && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts33 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 500 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
  --peers copy copy_kernel --placements 3 --out "$out/all" > "$out/all.log" 2>&1
echo "bench rc=$?"
rm -f "$out"/all/bench.partial.jsonl "$out"/all/bench_tails.png
python3 scripts/bench_runs.py "$out/all" | tail -n 3
sed -n 3,12p "$out/all/bench.md"
