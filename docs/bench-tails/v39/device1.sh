#!/usr/bin/env bash
# For the next session with a device (docs/perf.md v39): v38's final artifacts
# (.gpu/art43.tar.xz) through the GPU benchmark of every shape, then the CPU section twice on
# the GPU host's CPU (the Xeon of v33-v34: 57 of 58 there then) through the artifacts' native
# library, judged on both runs (scripts/bench_runs.py --cpu). Run v38's device4.sh (sweep and
# `pytest -m gpu`) in its own call first. Carry [".gpu", ".whl"].
#   bash docs/bench-tails/v39/device1.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art43 "$out"
work=/tmp/v39call1 && mkdir -p $work
timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
  --peers copy copy_kernel --placements 3 --out "$work/gpu1" > "$work/gpu1.log" 2>&1
echo "gpu bench rc=$?"
rm -f "$work/gpu1"/bench.partial.jsonl "$work/gpu1"/*.png
python3 scripts/bench_runs.py "$work/gpu1" | tail -n 3
for run in cpu1 cpu2; do
  timeout 150 python3 -m psa_tvm.cli bench --cpu-only --out "$work/$run" > "$work/$run.log" 2>&1
  echo "$run rc=$?"; sed -n 3p "$work/$run/bench.md" | cut -c1-120
done
python3 scripts/bench_runs.py --cpu "$work/cpu1" "$work/cpu2" > "$work/cpu_runs.txt"
tail -n 14 "$work/cpu_runs.txt"
tar -cJf "$out/v39call1.tar.xz" -C /tmp v39call1
