#!/usr/bin/env bash
# Device call 5 of docs/perf.md v36: the final artifacts (.gpu/art38.tar.xz: call 2's, with the
# 16-bit 20x20 8-row band for 88-99 B * nh added after call 4) against call 2's 16-bit builds on
# the same tensors (proto/compare36.py's call 5; .gpu/art37_kd32.tar.xz holds the changed
# builds and manifest, laid over a copy), the benchmark of every shape twice, and the native
# library's C++ example and compute-sanitizer.
#   bash docs/bench-tails/v36/device5.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v36/setup.sh art38 "$out"
rm -rf .artifacts37 && cp -r .artifacts38 .artifacts37 && tar -xJf .gpu/art37_kd32.tar.xz
timeout 100 python3 docs/bench-tails/v36/proto/compare36.py .artifacts37 "$PSA_TVM_ARTIFACTS" \
  "$out/call5.json" 5 > "$out/call5.log" 2>&1
echo "compare rc=$?"
grep -c False "$out/call5.log"
for run in run1 run2; do
  timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
    --peers copy copy_kernel --placements 3 --out "$out/$run" > "$out/$run.log" 2>&1
  echo "bench $run rc=$?"
  rm -f "$out/$run"/bench.partial.jsonl "$out/$run"/*.png
done
python3 scripts/bench_runs.py "$out/run1" "$out/run2" | tail -n 12
timeout 120 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" native | tail -n 8
