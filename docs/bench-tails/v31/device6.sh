#!/usr/bin/env bash
# Device call 6 of docs/perf.md v31: single-call spread of the 16-thread CPU forward against
# copy_ on the Xeon (single_calls31.py), on torch's OpenMP threads (default), on the library's
# own pool (PSA_TVM_TORCH_OPENMP=0), and with OMP_WAIT_POLICY=active.
#   bash docs/bench-tails/v31/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu && tar -xJf .gpu/art31.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts31 PYTHONUNBUFFERED=1
for setting in default "PSA_TVM_TORCH_OPENMP=0" "OMP_WAIT_POLICY=active"; do
  echo "== $setting"
  if [ "$setting" = default ]; then
    timeout 60 python3 docs/bench-tails/v31/single_calls31.py 400
  else
    env "$setting" timeout 60 python3 docs/bench-tails/v31/single_calls31.py 400
  fi
done 2>&1 | tee "$out/single_calls.txt"
