#!/usr/bin/env bash
# Device call 1 of docs/perf.md v33: the aligned-store prototypes (proto/fwd16f.c) on the GPU
# host's Xeon, 16 threads at the benchmark's batch-16 tails (128 slices), and 1 thread in L2.
#   bash docs/bench-tails/v33/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|L1d|L2|L3|Flags" > "$out/cpu.txt"
{
  for n in 300 920 1073 1600; do OMP_NUM_THREADS=16 timeout 90 ./.gpu/fwd16f_v4 128 $n 21; done
  for n in 300 1073; do OMP_NUM_THREADS=1 timeout 60 ./.gpu/fwd16f_v4 8 $n 21; done
  for n in 300 1073; do OMP_NUM_THREADS=16 timeout 90 ./.gpu/fwd16f_v4 128 $n 21; done
} 2>&1 | tee "$out/fwd16f.txt"
