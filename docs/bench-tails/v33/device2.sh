#!/usr/bin/env bash
# Device call 2 of docs/perf.md v33: the TIR-built aligned-line forward (cpu_lines) against the
# shipped cpu_shuffle forward and torch's copy_ on the Xeon, one process (proto/lines_lib.py).
#   bash docs/bench-tails/v33/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:.
for run in 1 2; do
  timeout 240 python3 docs/bench-tails/v33/proto/lines_lib.py run .gpu/lines --threads 16 \
    --rounds 21 2>&1 | tee "$out/lines_t16_run$run.txt"
done
