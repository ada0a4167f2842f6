#!/usr/bin/env bash
# Device call 5 of docs/perf.md v29: the final artifacts (.gpu/art29.tar.xz: band backwards for
# 16-bit N 897-928 at 240-264 B * nh and N 1073-1079 at 120-132 and 248-264): the band and tail
# GPU tests, one benchmark run of every shape (three placements), call 4's rows against v28's
# shifted backward, then every GPU test, the native library and host time
# (scripts/gpu_session.sh) in what is left of the call.
#   bash docs/bench-tails/v29/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
start=$SECONDS
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts29 && tar -xJf .gpu/art29.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts29
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 200 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_band.py \
  tests/test_gpu_tails.py -k "kd32" > "$out/test.log" 2>&1
echo "tests rc=$?"
tail -3 "$out/test.log"
timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --placements 3 --out "$out/all" > /tmp/all.log 2>&1
echo "bench rc=$?"
rm -f "$out"/all/*.png "$out"/all/bench.partial.jsonl
python3 scripts/bench_runs.py "$out/all" | tail -n 1
grep -E "(37x29|40x23)/b64" "$out/all/bench.md"
timeout 60 python3 docs/bench-tails/v29/proto/probe29.py .artifacts29 "$out/call5.json" 5 \
  .gpu/shift29c5.so .gpu/bwd29c4.so > "$out/call5.log" 2>&1
echo "probe rc=$?"; rm -f "$out/call5.json"  # at most eight files come back
left=$((560 - (SECONDS - start)))
echo "session budget ${left}s"
timeout "$left" bash scripts/gpu_session.sh .artifacts29 "$out/session" test native host \
  2>&1 | tail -n 20
