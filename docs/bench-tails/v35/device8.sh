#!/usr/bin/env bash
# Device call 8 of docs/perf.md v35: this round's final artifacts (.gpu/art36.tar.xz: float32
# 37x29 forwards of 40-66 B * nh on the 8-row band with L2-hinted loads) against v33's float32
# builds on the same tensors (proto/compare35.py; .gpu/art35_f32.tar.xz holds v33's float32
# key_dim 32 builds and manifest, the rest is shared), the benchmark of every shape twice, and
# the native library's C++ example and compute-sanitizer.
#   bash docs/bench-tails/v35/device8.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art36 "$out"
rm -rf .artifacts35 && tar -xJf .gpu/art35_f32.tar.xz && cp -rn .artifacts36/. .artifacts35/
timeout 200 python3 docs/bench-tails/v35/proto/compare35.py .artifacts35 "$PSA_TVM_ARTIFACTS" \
  "$out/call8.json" > "$out/call8.log" 2>&1
echo "compare rc=$?"
grep -c False "$out/call8.log"
for run in run1 run2; do
  timeout 200 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
    --peers copy copy_kernel --placements 3 --out "$out/$run" > "$out/$run.log" 2>&1
  echo "bench $run rc=$?"
  rm -f "$out/$run"/bench.partial.jsonl "$out/$run"/*.png
done
python3 scripts/bench_runs.py "$out/run1" "$out/run2" | tail -n 6
timeout 120 bash scripts/gpu_session.sh "$PSA_TVM_ARTIFACTS" "$out/session" native | tail -n 8
