#!/usr/bin/env bash
# Device call 3 of docs/perf.md v37: this round's artifacts (.gpu/art40.tar.xz) against v36's
# final ones on the same tensors (proto/compare37.py; .gpu/art39_kd32.tar.xz holds v36's key_dim
# 32 builds and manifest, laid over a copy), the batch sweep on this round's (proto/sweep37.py),
# and the benchmark of every shape twice.
#   bash docs/bench-tails/v37/device3.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art40 "$out"
rm -rf .artifacts39 && cp -r .artifacts40 .artifacts39 && tar -xJf .gpu/art39_kd32.tar.xz
timeout 170 python3 docs/bench-tails/v37/proto/compare37.py .artifacts39 "$PSA_TVM_ARTIFACTS" \
  "$out/call3.json" > "$out/call3.log" 2>&1
echo "compare rc=$?"
grep -c False "$out/call3.log"
timeout 120 python3 docs/bench-tails/v37/proto/sweep37.py "$PSA_TVM_ARTIFACTS" \
  "$out/sweep.json" > "$out/sweep.log" 2>&1
echo "sweep rc=$?"
grep -c "NOT EXACT" "$out/sweep.log"
for run in run1 run2; do
  timeout 150 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
    --peers copy copy_kernel --placements 3 --out "$out/$run" > "$out/$run.log" 2>&1
  echo "bench $run rc=$?"
  rm -f "$out/$run"/bench.partial.jsonl "$out/$run"/*.png
done
python3 scripts/bench_runs.py "$out/run1" "$out/run2" | tail -n 8
