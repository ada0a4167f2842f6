#!/usr/bin/env bash
# Device call 1 of docs/perf.md v34: every GPU test on the final v33 artifacts
# (.gpu/art33.tar.xz: v30's GPU builds, the CPU libraries rebuilt after v33's review, the native
# library), the run v33 could not fit in its device time.
#   bash docs/bench-tails/v34/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts33 && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts33
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 575 bash scripts/gpu_session.sh .artifacts33 "$out/session" test 2>&1 | tail -n 30
