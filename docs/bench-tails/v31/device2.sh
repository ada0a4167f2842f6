#!/usr/bin/env bash
# Device call 2 of docs/perf.md v31: every GPU test on this round's artifacts (the native library
# now holds the prefetching CPU kernels and asks cpu_pool.cc for the threshold).
#   bash docs/bench-tails/v31/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu && tar -xJf .gpu/art31.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts31
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 575 bash scripts/gpu_session.sh .artifacts31 "$out/session" test 2>&1 | tail -n 30
