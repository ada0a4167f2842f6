#!/usr/bin/env bash
# Device call 4 of docs/perf.md v25: the shipped artifacts' GPU tests, native library and host
# time (scripts/gpu_session.sh test native host), then one benchmark run of every shape
# (three placements), in what is left of the call's 590 s.
#   bash docs/bench-tails/v25/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
start=$SECONDS
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
bash scripts/gpu_session.sh .artifacts "$out/session" test native host 2>&1 | tail -n 40
left=$((590 - (SECONDS - start)))
echo "bench budget ${left}s"
timeout "$left" python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > "$out/all.log" 2>&1
echo "bench rc=$?"
python3 scripts/bench_runs.py "$out/all" | tail -n 1
