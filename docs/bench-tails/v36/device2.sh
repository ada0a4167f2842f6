#!/usr/bin/env bash
# Device call 2 of docs/perf.md v36: this round's artifacts (.gpu/art37.tar.xz: key_dim 32
# builds with float32 20x15 on hinted 8- and 16-row bands and 16-bit 6-head 20x20/b64 on 16-row
# bands at 6 CTAs an SM) against v35's on the same tensors (proto/compare36.py;
# .gpu/art36_kd32.tar.xz holds v35's changed key_dim 32 builds and manifest, laid over a copy),
# the benchmark of every shape twice, and the native library's C++ example and compute-sanitizer.
#   bash docs/bench-tails/v36/device2.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v36/setup.sh art37 "$out"
rm -rf .artifacts36 && cp -r .artifacts37 .artifacts36 && tar -xJf .gpu/art36_kd32.tar.xz
timeout 200 python3 docs/bench-tails/v36/proto/compare36.py .artifacts36 "$PSA_TVM_ARTIFACTS" \
  "$out/call2.json" > "$out/call2.log" 2>&1
echo "compare rc=$?"
grep -c False "$out/call2.log"
for run in run1 run2; do
  timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
    --peers copy copy_kernel --placements 3 --out "$out/$run" > "$out/$run.log" 2>&1
  echo "bench $run rc=$?"
  rm -f "$out/$run"/bench.partial.jsonl "$out/$run"/*.png
done
python3 scripts/bench_runs.py "$out/run1" "$out/run2" | tail -n 6
timeout 120 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" native | tail -n 8
