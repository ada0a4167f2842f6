#!/usr/bin/env bash
# Device call 7 of docs/perf.md v24: the nh 4 float32 forward with 64-position tiles and the
# register stage (.tune24g; the prototype's 64 x 128 row kernel beat the shipped set at N = 300),
# two runs over the shipped set's nine tuning shapes.
#   bash docs/bench-tails/v24/device7.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts .tune24g && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/tune24g.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
shapes="16,20,15;16,40,23;16,40,40;64,20,12;64,20,15;64,20,20;64,40,23;64,40,40;64,64,3"
for r in 1 2; do
  timeout 150 python3 -m psa_tvm.cli tune run --artifacts .tune24g --profiler --passes forward \
    --shapes "$shapes" > "$out/tune_r$r.log" 2>&1
  echo "tune r$r rc=$?"; mv .tune24g/results.jsonl "$out/tune_r$r.jsonl"
done
rm -f "$out"/*.log
