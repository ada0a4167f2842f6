#!/usr/bin/env bash
# Device call 2 of docs/perf.md v23, from the checkout root:  bash docs/bench-tails/v23/device2.sh OUT
# 1. The nh 2 / nh 6 16-bit forward candidates (.tune23) timed against a copy of their own
#    buffers, two runs. 2. The benchmark (every dtype, squares and tails) with the floor copied
#    between the kernel's buffers (kernel) and between buffers of its own (own), alternated.
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts .tune23 && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/tune23.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
shapes="16,20,15;16,20,20;16,40,40;64,20,12;64,20,15;64,20,20;64,40,23;64,40,40;64,64,3"
for r in 1 2; do
  timeout 150 python3 -m psa_tvm.cli tune run --artifacts .tune23 --profiler --passes forward \
    --shapes "$shapes" > "$out/tune_r$r.log" 2>&1
  echo "tune r$r rc=$?"; mv .tune23/results.jsonl "$out/tune_r$r.jsonl"
done
for c in kernel own; do
  timeout 130 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
    --copy-buffers $c --out "$out/all_$c" > "$out/all_$c.log" 2>&1
  echo "bench $c rc=$?"
done
for c in kernel own; do python3 scripts/bench_runs.py "$out/all_$c" | tail -n 1; done
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
