#!/usr/bin/env bash
# Device call 5 of docs/perf.md v28: this round's artifacts (.gpu/art28.tar.xz: the test and
# YOLO presets plus the attention builds, with the 32-row band forward for 16-bit N 1073-1079
# at 120-132 B * nh): call 4's probe (proto/probe28.py CALL 4: 16-row bands at 4 CTAs an SM for
# batch 64, the 32-row band at N 1073-1080) against them; the band and tail GPU tests (the
# band kernels through the native library too); then one benchmark run of every shape (three
# placements) in what is left of the call.
#   bash docs/bench-tails/v28/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
start=$SECONDS
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts28 && tar -xJf .gpu/art28.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts28
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 120 python3 docs/bench-tails/v28/proto/probe28.py .artifacts28 .gpu/band28c4.so \
  "$out/band28.json" 4 > "$out/band28.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/band28.log"
timeout 240 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_band.py \
  tests/test_gpu_tails.py -k "kd32" > "$out/test.log" 2>&1
echo "tests rc=$?"
tail -3 "$out/test.log"
left=$((590 - (SECONDS - start)))
echo "bench budget ${left}s"
timeout "$left" python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > /tmp/all.log 2>&1
echo "bench rc=$?"
rm -f "$out"/all/*.png
python3 scripts/bench_runs.py "$out/all" | tail -n 1
grep -E "37x29/b(16|64)" "$out/all/bench.md"
