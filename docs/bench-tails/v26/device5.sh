#!/usr/bin/env bash
# Device call 5 of docs/perf.md v26: this round's artifacts (the test and YOLO presets plus the
# attention builds, with the band forwards; built here into .gpu/art26full.tar.xz): every GPU
# test, the native library and host time (scripts/gpu_session.sh test native host), then one
# benchmark run of every shape (three placements) in what is left of the call's 590 s. The
# plots are dropped: the device returns at most eight files.
#   bash docs/bench-tails/v26/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
start=$SECONDS
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts && tar -xJf .gpu/art26full.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
bash scripts/gpu_session.sh .artifacts "$out" test native host 2>&1 | tail -n 30
left=$((590 - (SECONDS - start)))
echo "bench budget ${left}s"
timeout "$left" python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > /tmp/all.log 2>&1
echo "bench rc=$?"
rm -f "$out"/all/*.png
python3 scripts/bench_runs.py "$out/all" | tail -n 1
