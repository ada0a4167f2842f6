#!/usr/bin/env bash
# Device call 3 of docs/perf.md v32: on the Xeon, 16 threads: proto/fwd16.c with the halves
# joined at the loads and the no-shuffle probe; then the library (v32 artifacts) against copy_
# per round (v31/cpu_ab31.py) for the 16-bit batch-16 rows, with the default prefetch threshold
# and with every call prefetching (PSA_TVM_CPU_PREFETCH_BYTES=1).
#   bash docs/bench-tails/v32/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
for n in 300 400 920 1073 1600; do
  OMP_NUM_THREADS=16 timeout 60 ./.gpu/fwd16_v3 128 $n 21 | grep -E "threads|fwd (pitch|avx2 library|avx2 halves|no shuf|joined|avx2 prefetch, lib)"
done 2>&1 | tee "$out/fwd16.txt"
OMP_NUM_THREADS=16 timeout 60 ./.gpu/fwd16_v3 512 300 21 | grep -E "threads|fwd (pitch|avx2 library|avx2 halves|no shuf|joined|avx2 prefetch, lib)" | tee -a "$out/fwd16.txt"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts32 && tar -xJf .gpu/art32.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts32
shapes="20x20/b16 20x15/b16 40x23/b16 37x29/b16 40x40/b16"
timeout 150 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts32 --threads 16 --rounds 15 \
  --dtypes float16 bfloat16 --shapes $shapes 2>&1 | tee "$out/ab_default.txt"
PSA_TVM_CPU_PREFETCH_BYTES=1 timeout 150 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts32 \
  --threads 16 --rounds 15 --dtypes float16 bfloat16 --shapes $shapes 2>&1 | tee "$out/ab_prefetch_all.txt"
