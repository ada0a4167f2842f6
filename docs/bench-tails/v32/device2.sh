#!/usr/bin/env bash
# Device call 2 of docs/perf.md v32: proto/fwd16.c with the forward aligned by N % 16, on the
# Xeon, 16 threads (x86-64-v4 and -v3 builds).
#   bash docs/bench-tails/v32/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
for bin in fwd16_v4 fwd16_v3; do
  echo "== $bin"
  for n in 300 920 1073 1600; do
    OMP_NUM_THREADS=16 timeout 60 ./.gpu/$bin 128 $n 21 | grep -E "threads|fwd (pitch|avx2 library|avx2 aligned|avx512)"
  done
  OMP_NUM_THREADS=16 timeout 60 ./.gpu/$bin 512 300 21 | grep -E "threads|fwd (pitch|avx2 library|avx2 aligned|avx512)"
done 2>&1 | tee "$out/fwd16.txt"
