#!/usr/bin/env bash
# Device call 1 of docs/perf.md v23: the timer probe (probe_timers.py). From the checkout root:
#   bash docs/bench-tails/v23/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v23/probe_timers.py "$out/probe.json" 2>&1 | tee "$out/probe.log" | tail -n 60
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
