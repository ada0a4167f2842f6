#!/usr/bin/env bash
# v42: the key_dim 64 (2 heads) and 128 (8 heads) builds retuned (tiled and shifted params,
# bands) against the same configurations built from the previous round's table and band.py,
# on one GPU: the batch sweep (8-300 MB, both passes, all dtypes, profiler time over a memcpy
# of the same bytes, three placements), old then new per key_dim.
# Carry [".gpu44", ".whl"]: .gpu44/art44.tar.xz (this round) and .gpu44/old42.tar.xz.
#   bash docs/bench-tails/v42/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p .gpu && cp .gpu44/art44.tar.xz .gpu/
source docs/bench-tails/v38/setup.sh art44 "$out"
rm -rf .artifacts_old42 && tar -xJf .gpu44/old42.tar.xz
sweep() {  # sweep NAME LIMIT ARTIFACTS ARGS...
  local name=$1 limit=$2 artifacts=$3; shift 3
  local t0=$SECONDS
  timeout "$limit" python3 scripts/sweep_batches.py --artifacts "$artifacts" "$@" \
    --out "$out/$name.json" > "$out/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s"; grep -A 6 "calls above" "$out/$name.log" | head -n 7
}
all="--dtypes float32 float16 bfloat16"
sweep kd64_old 80 .artifacts_old42 --key-dim 64 --heads 2 $all
sweep kd64_new 80 "$PSA_TVM_ARTIFACTS" --key-dim 64 --heads 2 $all
sweep kd128_old 80 .artifacts_old42 --key-dim 128 --heads 8 $all
sweep kd128_new 80 "$PSA_TVM_ARTIFACTS" --key-dim 128 --heads 8 $all
