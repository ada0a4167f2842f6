#!/usr/bin/env bash
# Device call 5 of docs/perf.md v38: the benchmark of every shape on this round's final
# artifacts (.gpu/art43.tar.xz), then the native library's C++ example and compute-sanitizer.
# Everything but the summary is packed into OUT/call5.tar.xz (a call returns a few files).
#   bash docs/bench-tails/v38/device5.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art43 "$out"
work=/tmp/call5 && mkdir -p $work
timeout 170 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
  --peers copy copy_kernel --placements 3 --out "$work/run1" > "$work/run1.log" 2>&1
echo "bench rc=$?"
rm -f "$work/run1"/bench.partial.jsonl "$work/run1"/*.png
python3 scripts/bench_runs.py "$work/run1" > "$work/runs.txt"
tail -n 8 "$work/runs.txt"
timeout 90 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$work/session" native | tail -n 6
tar -cJf "$out/call5.tar.xz" -C /tmp call5
