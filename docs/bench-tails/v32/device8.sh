#!/usr/bin/env bash
# Device call 8 of docs/perf.md v32: v31's CPU libraries (.artifacts31) against the shipped v32
# ones (.artifacts32: joined loads in the 16-bit forward only) on the Xeon, one process,
# per-round ratios to copy_ (v31/cpu_ab31.py), 16 threads, twice.
#   bash docs/bench-tails/v32/device8.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu .artifacts32
tar -xJf .gpu/art31.tar.xz && tar -xJf .gpu/art32.tar.xz
export PYTHONPATH=/tmp/site:.
for run in 1 2; do
  timeout 200 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts31 .artifacts32 \
    --threads 16 --rounds 15 2>&1 | tee "$out/ab_t16_run$run.txt"
done
