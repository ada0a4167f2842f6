#!/usr/bin/env bash
# Device call 8 of docs/perf.md v37: scripts/sweep_batches.py on bfloat16 (calls 1-7 swept
# float32 and float16), on this round's final artifacts (.gpu/art41.tar.xz).
#   bash docs/bench-tails/v37/device8.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art41 "$out"
timeout 100 python3 scripts/sweep_batches.py --dtypes bfloat16 --out "$out/sweep_bf16.json" \
  > "$out/sweep_bf16.log" 2>&1
echo "sweep rc=$?"
tail -n 24 "$out/sweep_bf16.log"
