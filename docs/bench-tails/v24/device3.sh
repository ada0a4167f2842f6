#!/usr/bin/env bash
# Device call 3 of docs/perf.md v24: the tiled forward with its slices launched along x
# (slices_on_x) and two slices per CTA, on the shipped sets of nh 4 and nh 6 (.tune24x), two
# runs; then the benchmark of the shipped artifacts on this GPU (one run, three placements).
#   bash docs/bench-tails/v24/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts .tune24x && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/tune24x.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
shapes="16,20,15;16,20,20;16,40,40;64,20,12;64,20,15;64,20,20;64,40,23;64,40,40;64,64,3"
for r in 1 2; do
  timeout 150 python3 -m psa_tvm.cli tune run --artifacts .tune24x --profiler --passes forward \
    --shapes "$shapes" > "$out/tune_r$r.log" 2>&1
  echo "tune r$r rc=$?"; mv .tune24x/results.jsonl "$out/tune_r$r.jsonl"
done
timeout 150 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > "$out/all.log" 2>&1
echo "bench rc=$?"
python3 scripts/bench_runs.py "$out/all" | tail -n 1
rm -f "$out"/*.log
