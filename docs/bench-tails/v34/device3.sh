#!/usr/bin/env bash
# Device call 3 of docs/perf.md v34: the native library (C++ example, compute-sanitizer) and
# host time per call; both CPU launch paths exact on every configuration (v33's lines_check.py);
# the benchmark's CPU section twice on the Xeon.
#   bash docs/bench-tails/v34/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts33 && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 200 bash scripts/gpu_session.sh .artifacts33 "$out/session" native host 2>&1 | tail -n 12
timeout 150 python3 docs/bench-tails/v33/lines_check.py .artifacts33 > "$out/lines_check.txt" 2>&1
echo "lines_check rc=$? $(tail -n 1 "$out/lines_check.txt")"
export PSA_TVM_ARTIFACTS=$PWD/.artifacts33
for run in 1 2; do
  timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out /tmp/bench$run > "$out/bench$run.log" 2>&1
  echo "cpu bench $run rc=$?"
done
