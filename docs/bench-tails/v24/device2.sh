#!/usr/bin/env bash
# Device call 2 of docs/perf.md v24: the prototype again with tiles fitted to one N; the nh 6
# 16-bit forward candidates with 400-position tiles (.tune24) and the nh 4 16-bit shifted
# candidates with other tiles (.tune24s), two runs each.
#   bash docs/bench-tails/v24/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts .tune24 .tune24s && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/tune24.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 200 python3 docs/bench-tails/v24/proto/probe_flat.py .gpu/proto.so "$out/flat.json" \
  > "$out/flat.log" 2>&1
echo "probe rc=$?"
shapes="16,20,15;16,20,20;16,40,40;64,20,12;64,20,15;64,20,20;64,40,23;64,40,40;64,64,3"
for r in 1 2; do
  timeout 150 python3 -m psa_tvm.cli tune run --artifacts .tune24 --profiler --passes forward \
    --shapes "$shapes" > "$out/tune_r$r.log" 2>&1
  echo "tune r$r rc=$?"; mv .tune24/results.jsonl "$out/tune_r$r.jsonl"
  timeout 150 python3 -m psa_tvm.cli tune run --artifacts .tune24s --profiler --shifted \
    > "$out/tunes_r$r.log" 2>&1
  echo "tune shifted r$r rc=$?"; mv .tune24s/results.jsonl "$out/tunes_r$r.jsonl"
done
