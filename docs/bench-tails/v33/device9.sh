#!/usr/bin/env bash
# Device call 9 of docs/perf.md v33: after the review (the native line rule moved into
# TakesLines, no behaviour change), lines_check.py on the rebuilt artifacts: both launch paths,
# every configuration and dtype, PSA_TVM_CPU_LINES 1 / 0 / auto, on the Xeon.
#   bash docs/bench-tails/v33/device9.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts33 && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
timeout 150 python3 docs/bench-tails/v33/lines_check.py .artifacts33 > "$out/lines_check.txt" 2>&1
echo "lines_check rc=$? $(tail -n 1 "$out/lines_check.txt")"
