#!/usr/bin/env bash
# Device call 5 of docs/perf.md v23, the final artifacts (the nh 6 bfloat16 forward on the
# float16 set, no range kernel): every GPU test, the native step, then the benchmark once.
#   bash docs/bench-tails/v23/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
bash scripts/gpu_session.sh .artifacts "$out" test native
timeout 100 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all_C1" > "$out/all_C1.log" 2>&1
echo "bench rc=$?"; python3 scripts/bench_runs.py "$out/all_C1" | tail -n 1
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
