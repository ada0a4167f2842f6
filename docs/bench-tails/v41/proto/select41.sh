#!/usr/bin/env bash
# After call 1: the returned timings into the candidate directories, the ranking, then
# `tune select` per directory on its own shapes (only calls of 8 MB or more scored, by the
# worst of them: the target is per call), and bfloat16 given float16's params.
#   bash docs/bench-tails/v41/proto/select41.sh CALL1_DIR [DIR...]
set -euo pipefail
call1=$1; shift
dirs=${*:-t64 t128 s64 s128 s32}
for d in t32 t64 t128 s128 s64 s32 b32; do
  [ -f "$call1/results_$d.jsonl" ] && cp "$call1/results_$d.jsonl" ".tune41/$d/results.jsonl"
done
python3 docs/bench-tails/v41/proto/rank41.py .tune41 t32 t64 t128 s128 s64 s32 b32 \
  > "$call1/rank.txt"
declare -A shapes=(
  [t64]="16,40,40;64,40,40;64,20,15;32,20,20;48,40,23"
  [t128]="2,40,40;8,40,40;8,20,15;4,20,20;6,40,23"
  [s128]="1,37,29;4,37,29;12,37,29;8,25,25;8,40,23;2,40,40;8,40,40"
  [s64]="8,37,29;32,37,29;96,37,29;64,25,25"
  [s32]="8,37,29;16,37,29;40,37,29;72,37,29;128,37,29")
for d in $dirs; do
  opt=--shapes; [ "${d:0:1}" = s ] && opt=--shifted-shapes
  python3 scripts/tune.py select --artifacts ".tune41/$d" "$opt" "${shapes[$d]}" \
    -o schedules/sm_90.json --update --min-mb 8 --objective worst | grep -v "kd=32\|kd=16\|kd=8" || true
done
python3 docs/bench-tails/v41/proto/share_dtype41.py schedules/sm_90.json
