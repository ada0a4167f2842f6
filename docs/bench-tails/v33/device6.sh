#!/usr/bin/env bash
# Device call 6 of docs/perf.md v33: the aligned-line forward's chunk (128, 256 shipped, 384,
# 512, whole rows) against the shipped cpu_shuffle forward and copy_ on the Xeon, one process,
# 16 threads (proto/lines_lib.py; libraries built here into .gpu/lines).
#   bash docs/bench-tails/v33/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:.
timeout 400 python3 docs/bench-tails/v33/proto/lines_lib.py run .gpu/lines --threads 16 \
  --rounds 15 --shapes 20x20/b16 20x15/b16 20x12/b16 40x23/b16 37x29/b16 37x29/b1 20x15/b64 \
  2>&1 | tee "$out/chunks_t16.txt"
