#!/usr/bin/env bash
# Device call 3 of docs/perf.md v23 (HEAD's artifacts, the nh 6 range kernel in): every GPU test,
# the C++ example and compute-sanitizer over the native library, host time per call.
#   bash docs/bench-tails/v23/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
bash scripts/gpu_session.sh .artifacts "$out" test native host
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
