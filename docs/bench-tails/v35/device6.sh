#!/usr/bin/env bash
# Device call 6 of docs/perf.md v35: the benchmark of every shape, twice, on this round's
# artifacts (.gpu/art35.tar.xz; the GPU kernels are v33's), memcpy and elementwise-copy floors,
# three placements a row.
#   bash docs/bench-tails/v35/device6.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v35/setup.sh art35 "$out"
for run in run1 run2; do
  timeout 240 python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
    --peers copy copy_kernel --placements 3 --out "$out/$run" > "$out/$run.log" 2>&1
  echo "bench $run rc=$?"
  rm -f "$out/$run"/bench.partial.jsonl "$out/$run"/*.png
done
python3 scripts/bench_runs.py "$out/run1" "$out/run2" | tail -n 12
