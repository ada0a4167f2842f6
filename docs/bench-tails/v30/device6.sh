#!/usr/bin/env bash
# Device call 6 of docs/perf.md v30: every GPU test again, with no step limit but the call's
# (call 5's test step ran out of its 420 s at 80% of the suite, nothing failed), slowest listed.
#   bash docs/bench-tails/v30/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts30 && tar -xJf .gpu/art30.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts30 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 530 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=12 tests \
  > "$out/test.log" 2>&1
echo "tests rc=$?"
tail -n 30 "$out/test.log"
