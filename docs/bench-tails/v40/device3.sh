#!/usr/bin/env bash
# The sweep of the test matrix's key_dim 64 (2 heads) and 128 (8 heads) builds, all dtypes
# (v38 call 3: their 16-bit backwards at 1.07-1.45x a copy), then the CPU section of the
# benchmark twice on the GPU host's CPU through the artifacts' native library (docs/perf.md
# v40), judged on both runs.
#   bash docs/bench-tails/v40/device3.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art43 "$out"
for kd in "64 2" "128 8"; do
  set -- $kd
  timeout 70 python3 scripts/sweep_batches.py --key-dim "$1" --heads "$2" \
    --dtypes float32 float16 bfloat16 --out "$out/sweep_kd$1.json" > "$out/sweep_kd$1.log" 2>&1
  echo "kd$1 sweep rc=$?"; grep -A 8 "calls above" "$out/sweep_kd$1.log" | head -n 8
done
work=/tmp/v40cpu && mkdir -p $work
lscpu | grep -E "Model name|^CPU\(s\)" > "$out/cpu.txt"
for run in cpu1 cpu2; do
  timeout "${CPU_LIMIT:-150}" python3 -m psa_tvm.cli bench --cpu-only --out "$work/$run" > "$work/$run.log" 2>&1
  echo "$run rc=$?"; sed -n 3p "$work/$run/bench.md" | cut -c1-120
  rm -f "$work/$run"/*.png
done
python3 scripts/bench_runs.py --cpu "$work/cpu1" "$work/cpu2" > "$work/cpu_runs.txt"
tail -n 14 "$work/cpu_runs.txt"
tar -cJf "$out/v40cpu.tar.xz" -C /tmp v40cpu
