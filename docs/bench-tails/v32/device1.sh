#!/usr/bin/env bash
# Device call 1 of docs/perf.md v32: the 16-bit transpose prototypes (proto/fwd16.c) on the
# GPU host's Xeon, 16 threads, at the benchmark's batch-16 rows (128 slices) and one batch-64.
#   bash docs/bench-tails/v32/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
lscpu | head -25 > "$out/cpu.txt"
for bin in fwd16_v4 fwd16_v3; do
  for n in 240 300 400 920 1073 1600; do
    OMP_NUM_THREADS=16 timeout 60 ./.gpu/$bin 128 $n 21
  done
  OMP_NUM_THREADS=16 timeout 60 ./.gpu/$bin 512 300 21
done 2>&1 | tee "$out/fwd16.txt"
