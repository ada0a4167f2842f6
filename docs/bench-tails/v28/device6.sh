#!/usr/bin/env bash
# Device call 6 of docs/perf.md v28: the final artifacts (.gpu/art28.tar.xz: 16-row bands at
# 4 x 320 threads for 120-132 B * nh and at 4 x 384 for 248-264, 16-bit N 1072-1080): the band
# and tail GPU tests, one benchmark run of every shape (three placements), call 4's probe
# against them, then every GPU test, the native library and host time (scripts/gpu_session.sh)
# in what is left of the call.
#   bash docs/bench-tails/v28/device6.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
start=$SECONDS
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts28 && tar -xJf .gpu/art28.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts28
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 150 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_band.py \
  tests/test_gpu_tails.py -k "kd32" > "$out/test.log" 2>&1
echo "tests rc=$?"
tail -3 "$out/test.log"
timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > /tmp/all.log 2>&1
echo "bench rc=$?"
rm -f "$out"/all/*.png "$out"/all/bench.partial.jsonl
python3 scripts/bench_runs.py "$out/all" | tail -n 1
grep -E "37x29/b(16|64)" "$out/all/bench.md"
timeout 60 python3 docs/bench-tails/v28/proto/probe28.py .artifacts28 .gpu/band28c4.so \
  "$out/band28.json" 4 > "$out/band28.log" 2>&1
echo "probe rc=$?"; rm -f "$out/band28.json"  # at most eight files come back
grep -E "^fwd|shipped" "$out/band28.log"
left=$((560 - (SECONDS - start)))
echo "session budget ${left}s"
timeout "$left" bash scripts/gpu_session.sh .artifacts28 "$out/session" test native host \
  2>&1 | tail -n 20
