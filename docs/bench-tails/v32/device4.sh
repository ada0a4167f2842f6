#!/usr/bin/env bash
# Device call 4 of docs/perf.md v32: proto/fwd16.c's staged bands (aligned output stores, split
# loads from an L1 buffer) on the Xeon, 16 threads.
#   bash docs/bench-tails/v32/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
for shape in "128 300" "128 920" "128 1073" "512 300" "128 400"; do
  OMP_NUM_THREADS=16 timeout 60 ./.gpu/fwd16_v3 $shape 21 | grep -E "threads|fwd (pitch|avx2 library|staged)"
done 2>&1 | tee "$out/fwd16.txt"
