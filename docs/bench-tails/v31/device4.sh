#!/usr/bin/env bash
# Device call 4 of docs/perf.md v31: the 16-bit CPU forwards that miss 1.5x on the GPU host's
# Xeon (in its caches) with other cpu_shuffle tile shapes, built from this round's tree with only
# the 16-bit default params changed (.gpu/v16.tar.xz): v16B square tiles without the lane tail,
# v16C lane tiles (each 128-bit half stored on its own), v16D 16-byte vectors; the shipped
# .artifacts31 first. Ratios per round (cpu_ab31.py) at 16 and 4 threads.
#   bash docs/bench-tails/v31/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu .v16 && tar -xJf .gpu/art31.tar.xz && tar -xJf .gpu/v16.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts31 PYTHONUNBUFFERED=1
for threads in 16 4; do
  timeout 200 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts31 .v16/v16B .v16/v16C \
    .v16/v16D --threads "$threads" --rounds 11 --dtypes float16 bfloat16 \
    > "$out/ab16_t$threads.txt" 2>&1
  echo "ab t$threads rc=$?"
done
cat "$out/ab16_t16.txt" "$out/ab16_t4.txt"
