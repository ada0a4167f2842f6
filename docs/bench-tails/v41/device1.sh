#!/usr/bin/env bash
# v41 call 1: time the tuning candidates of proto/tune41.py by the profiler (CUPTI kernel time
# against a copy of the same bytes from the pass's inputs into its outputs, one placement;
# each step resumable):
# the key_dim 64 (2 heads) and 128 (8 heads) tiled and shifted candidates, each on shapes of
# its own size range (key_dim 128 at 8 heads moves 8x the bytes of key_dim 64 at 2 heads per
# batch, so its batches are an eighth), the float16 key_dim 32 forward's smaller tiles at 8-26
# MB, and float32 key_dim 32 band kernels at N = 33. (The key_dim 32 shifted candidates, s32,
# are built but left for a session with more device time: two hours of refused starts.)
#   bash docs/bench-tails/v41/device1.sh OUT
set -uo pipefail
out=$1
# v38's setup.sh without its artifact tarball (the candidates are the artifacts here, their
# fatbins cut to the sm_90 ELF by proto/fat2cubin.py to fit the carry; carry
# [".gpu41", ".whl"], 64 MiB with the tree)
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
rm -rf .tune41 && tar -xJf .gpu41/tune41.tar.xz
run() {  # run DIR LIMIT SHAPES [--shifted]
  local dir=$1 limit=$2 shapes=$3; shift 3
  local t0=$SECONDS
  timeout "$limit" python3 scripts/tune.py run --artifacts ".tune41/$dir" --profiler \
    --placements 1 --reps 20 --shapes "$shapes" "$@" > "$out/run_$dir.log" 2>&1
  echo "$dir rc=$? $((SECONDS - t0)) s $(wc -l < ".tune41/$dir/results.jsonl") records"
  tail -n 2 "$out/run_$dir.log" | tr '\r' '\n' | tail -n 1
  cp ".tune41/$dir/results.jsonl" "$out/results_$dir.jsonl"
}
run t32 15 "20,20,20;16,20,20;36,20,12;48,20,12;12,40,23;32,20,20;64,20,20" --passes forward
run t64 150 "16,40,40;64,40,40;64,20,15;32,20,20;48,40,23"
run t128 90 "2,40,40;8,40,40;8,20,15;4,20,20;6,40,23"
run s128 60 "1,37,29;4,37,29;12,37,29;8,25,25;8,40,23;2,40,40;8,40,40" --shifted
run s64 55 "8,37,29;32,37,29;96,37,29;64,25,25" --shifted
run b32 60 "96,1,33;120,1,33;144,1,33;192,1,33"
