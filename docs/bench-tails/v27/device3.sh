#!/usr/bin/env bash
# Device call 3 of docs/perf.md v27: the final artifacts (.gpu/art27.tar.xz: size ranges 40-66,
# 88-99, 120-132 B * nh for the 37x29 band forwards): the band and tail GPU tests, then one
# benchmark run of every shape (three placements) in what is left of the call. The plots are
# dropped: the device returns at most eight files.
#   bash docs/bench-tails/v27/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
start=$SECONDS
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts27 && tar -xJf .gpu/art27.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts27
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
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
