#!/usr/bin/env bash
# v41 call 2: the rebuilt artifacts (.gpu44/art44.tar.xz: v41's table) through the batch sweep
# of every configuration it retuned, all dtypes: key_dim 32 (2, 4, 6 heads), key_dim 64 (2
# heads) and 128 (8 heads), 8-300 MB, both passes, profiler time over a memcpy of the same
# bytes, three placements; then the GPU benchmark of every shape.
#   bash docs/bench-tails/v41/device2.sh OUT
set -uo pipefail
out=$1
mkdir -p .gpu && cp .gpu44/art44.tar.xz .gpu/
source docs/bench-tails/v38/setup.sh art44 "$out"
sweep() {  # sweep NAME LIMIT ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 scripts/sweep_batches.py "$@" --out "$out/$name.json" \
    > "$out/$name.log" 2>&1
  echo "$name rc=$?"; grep -A 12 "calls above" "$out/$name.log" | head -n 12
}
sweep sweep 110
sweep sweep_bf16 50 --dtypes bfloat16
sweep sweep_kd64 70 --key-dim 64 --heads 2 --dtypes float32 float16 bfloat16
sweep sweep_kd128 70 --key-dim 128 --heads 8 --dtypes float32 float16 bfloat16
work=/tmp/v41call2 && mkdir -p $work
timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
  --peers copy copy_kernel --placements 3 --out "$work/gpu1" > "$work/gpu1.log" 2>&1
echo "gpu bench rc=$?"
rm -f "$work/gpu1"/bench.partial.jsonl "$work/gpu1"/*.png
python3 scripts/bench_runs.py "$work/gpu1" | tail -n 3
tar -cJf "$out/v41call2.tar.xz" -C /tmp v41call2
