#!/usr/bin/env bash
# Device call 7 of docs/perf.md v33: the aligned-line forward for float32 (16 positions x 4
# channels, vpermt2d; chunks 256, 128, 512) against the shipped cpu_shuffle forward and copy_
# on the Xeon, one process, 16 threads, twice (proto/lines_lib.py; built here into .gpu/lines32).
#   bash docs/bench-tails/v33/device7.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:.
for run in 1 2; do
  timeout 250 python3 docs/bench-tails/v33/proto/lines_lib.py run .gpu/lines32 --threads 16 \
    --rounds 15 --dtypes float32 --shapes 20x20/b16 40x40/b16 20x15/b16 20x12/b16 40x23/b16 \
    37x29/b16 37x29/b1 20x15/b64 2>&1 | tee "$out/f32_t16_run$run.txt"
done
