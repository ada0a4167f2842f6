#!/usr/bin/env bash
# Device call 5 of docs/perf.md v37: on this round's final artifacts (.gpu/art41.tar.xz) the
# benchmark of every shape twice, the batch sweep (proto/sweep37.py), the GPU band tests with
# the batches added after call 4, and the native library's C++ example and compute-sanitizer.
# Everything but the summary is packed into OUT/call5.tar.xz (a call returns a few files).
#   bash docs/bench-tails/v37/device5.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art41 "$out"
work=/tmp/call5 && mkdir -p $work
for run in run1 run2; do
  timeout 150 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
    --peers copy copy_kernel --placements 3 --out "$work/$run" > "$work/$run.log" 2>&1
  echo "bench $run rc=$?"
  rm -f "$work/$run"/bench.partial.jsonl "$work/$run"/*.png
done
python3 scripts/bench_runs.py "$work/run1" "$work/run2" > "$work/runs.txt"
tail -n 8 "$work/runs.txt"
timeout 100 python3 docs/bench-tails/v37/proto/sweep37.py "$PSA_TVM_ARTIFACTS" \
  "$work/sweep.json" > "$work/sweep.log" 2>&1
echo "sweep rc=$? not exact: $(grep -c 'NOT EXACT' "$work/sweep.log")"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_band.py \
  > "$work/band_tests.log" 2>&1
echo "band tests rc=$?: $(tail -n 1 "$work/band_tests.log")"
timeout 90 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$work/session" native | tail -n 6
tar -cJf "$out/call5.tar.xz" -C /tmp call5
