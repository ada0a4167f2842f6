#!/usr/bin/env bash
# Device call 1 of docs/perf.md v30: float32 shifted forwards with grains 4 and 8 against the
# shipped artifacts (.gpu/art30.tar.xz, this round's build of main at its start), then a
# float32 tail benchmark of the shipped artifacts and the CPU section on this host's CPU.
#   bash docs/bench-tails/v30/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts30 && tar -xJf .gpu/art30.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts30 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v30/proto/probe30.py .artifacts30 "$out/call1.json" 1 \
  .gpu/grain30.so > "$out/call1.log" 2>&1
echo "probe rc=$?"
timeout 120 python3 -m psa_tvm.cli bench --shapes tails --dtypes float32 --schedules tiled \
  --peers copy --placements 3 --out "$out/f32" > "$out/f32.log" 2>&1
echo "bench rc=$?"
rm -f "$out"/f32/*.png "$out"/f32/bench.partial.jsonl
timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out "$out/cpu" > "$out/cpu.log" 2>&1
echo "cpu rc=$?"
rm -f "$out"/cpu/*.png "$out"/cpu/bench.partial.jsonl "$out"/cpu/bench.json
grep -A14 "^fwd nh4 float32 16x37x29" "$out/call1.log" | head -20
