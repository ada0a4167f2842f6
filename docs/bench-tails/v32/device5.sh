#!/usr/bin/env bash
# Device call 5 of docs/perf.md v32: the CPU libraries with the forward's halves joined at the
# loads (.artifacts-joined, cpu_shuffle joined_loads on) against v32's (.artifacts32) on the
# Xeon, one process, per-round ratios to copy_ (v31/cpu_ab31.py), 16 threads, twice.
#   bash docs/bench-tails/v32/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts32 .artifacts-joined && tar -xJf .gpu/art32.tar.xz && tar -xJf .gpu/joined.tar.xz
export PYTHONPATH=/tmp/site:.
for run in 1 2; do
  timeout 250 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts32 .artifacts-joined \
    --threads 16 --rounds 15 2>&1 | tee "$out/ab_t16_run$run.txt"
done
