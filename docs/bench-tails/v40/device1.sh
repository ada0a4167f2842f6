#!/usr/bin/env bash
# Device call 1 of docs/perf.md v40: v38's final kernels (this checkout's build, .gpu/art43.tar.xz)
# through the batch sweep (all three dtypes, key_dim 32) and the GPU benchmark of every shape.
#   bash docs/bench-tails/v40/device1.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art43 "$out"
timeout 110 python3 scripts/sweep_batches.py --out "$out/sweep.json" > "$out/sweep.log" 2>&1
echo "sweep rc=$?"; grep -A 18 "calls above" "$out/sweep.log" | head -n 18
timeout 50 python3 scripts/sweep_batches.py --dtypes bfloat16 --out "$out/sweep_bf16.json" \
  > "$out/sweep_bf16.log" 2>&1
echo "bf16 sweep rc=$?"; grep -A 10 "calls above" "$out/sweep_bf16.log" | head -n 10
work=/tmp/v40call1 && mkdir -p $work
timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
  --peers copy copy_kernel --placements 3 --out "$work/gpu1" > "$work/gpu1.log" 2>&1
echo "gpu bench rc=$?"
rm -f "$work/gpu1"/bench.partial.jsonl "$work/gpu1"/*.png
python3 scripts/bench_runs.py "$work/gpu1" | tail -n 3
tar -cJf "$out/v40call1.tar.xz" -C /tmp v40call1
