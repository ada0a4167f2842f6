#!/usr/bin/env bash
# Device call 4 of docs/perf.md v33: every GPU test on this round's artifacts (v30's GPU builds,
# v33's CPU libraries with the aligned-line forward, and the native library).
#   bash docs/bench-tails/v33/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts33 && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts33
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 575 bash scripts/gpu_session.sh .artifacts33 "$out/session" test 2>&1 | tail -n 30
