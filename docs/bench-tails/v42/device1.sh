#!/usr/bin/env bash
# v42 call (after v41's device1.sh): time the band candidates of proto/bands42.py for the
# key_dim 64 (2 heads) and 128 (8 heads) builds at 37x29, 20x15 and (16-bit) 40x23, then v41's deferred key_dim
# 32 shifted candidates (s32), by the profiler against a copy of the same bytes from the pass's
# inputs into its outputs, one placement; each step resumable, so a call cut short is rerun.
# Carry [".gpu41", ".gpu42", ".whl"] (proto/prepare.sh builds them).
#   bash docs/bench-tails/v42/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
[ -d .tune42 ] || tar -xJf .gpu42/tune42.tar.xz
[ -d .tune41 ] || tar -xJf .gpu41/tune41.tar.xz
run() {  # run ROOT DIR LIMIT SHAPES [ARGS...]
  local root=$1 dir=$2 limit=$3 shapes=$4; shift 4
  local t0=$SECONDS
  timeout "$limit" python3 scripts/tune.py run --artifacts "$root/$dir" --profiler \
    --placements 1 --reps 20 --shapes "$shapes" "$@" > "$out/run_$dir.log" 2>&1
  echo "$dir rc=$? $((SECONDS - t0)) s $(wc -l < "$root/$dir/results.jsonl") records"
  tail -n 2 "$out/run_$dir.log" | tr '\r' '\n' | tail -n 1
  cp "$root/$dir/results.jsonl" "$out/results_$dir.jsonl"
}
# bands42.TIMED: 21-42 builds a directory, 3 shapes, both passes
run .tune42 b64_37x29 60 "8,37,29;32,37,29;96,37,29"
run .tune42 b64_20x15 70 "32,20,15;64,20,15;128,20,15"
run .tune42 b64_40x23 50 "16,40,23;48,40,23;128,40,23"
run .tune42 b128_37x29 70 "1,37,29;4,37,29;12,37,29"
run .tune42 b128_20x15 70 "4,20,15;8,20,15;16,20,15"
run .tune42 b128_40x23 60 "2,40,23;6,40,23;16,40,23"
run .tune41 s32 110 "8,37,29;16,37,29;40,37,29;72,37,29;128,37,29" --shifted
python3 docs/bench-tails/v42/proto/rank_bands42.py .tune42 b64_37x29 b64_20x15 b64_40x23 \
  b128_37x29 b128_20x15 b128_40x23 > "$out/rank_bands.txt" 2>&1
grep "best" "$out/rank_bands.txt"
