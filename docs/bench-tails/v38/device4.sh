#!/usr/bin/env bash
# Device call 4 of docs/perf.md v38: on this round's final artifacts (.gpu/art43.tar.xz) the
# batch sweep (scripts/sweep_batches.py) of float32 and float16, then bfloat16, and every GPU
# test.
#   bash docs/bench-tails/v38/device4.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art43 "$out"
timeout 100 python3 scripts/sweep_batches.py --out "$out/sweep.json" > "$out/sweep.log" 2>&1
echo "sweep rc=$?"; grep -A 18 "calls above" "$out/sweep.log" | head -n 18
timeout 40 python3 scripts/sweep_batches.py --dtypes bfloat16 --out "$out/sweep_bf16.json" \
  > "$out/sweep_bf16.log" 2>&1
echo "bf16 sweep rc=$?"; grep -A 10 "calls above" "$out/sweep_bf16.log" | head -n 10
timeout 430 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" test 2>&1 | tail -n 12
