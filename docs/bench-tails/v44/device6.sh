#!/usr/bin/env bash
# v44, third call: key_dim 128's 16-bit band-forward candidates past a wave (proto/bands44.py,
# .gpu47/tune44.tar.xz) timed by the profiler and ranked, then the GPU benchmark of every shape
# (v40's device1.sh line) in what is left of LIMIT seconds. Everything goes into one tarball,
# OUT/call.tar.xz (a call brings back 8 files), with the ranking and the benchmark's summary
# printed.
# Carry [".gpu47", ".whl"].
#   LIMIT=560 bash docs/bench-tails/v44/device6.sh OUT
set -uo pipefail
start=$SECONDS out=$1
source docs/bench-tails/v43/lib.sh .gpu47 art47 "$out/call"
tar -xJf .gpu47/tune44.tar.xz
for grid in 20x15 40x23 37x29; do tune_dir .tune44 "f128_$grid" 60; done  # shapes: timed.txt
python3 docs/bench-tails/v42/proto/rank_bands42.py .tune44 f128_20x15 f128_40x23 f128_37x29 \
  > "$lib_out/rank_f128.txt" 2>&1
grep "best\|proposal" "$lib_out/rank_f128.txt"
left=$(( ${LIMIT:-560} - (SECONDS - start) - 20 ))
timeout "$left" python3 -m psa_tvm.cli bench --shapes all --schedules tiled \
  --peers copy copy_kernel --placements 3 --out "$lib_out/bench" > "$lib_out/bench.log" 2>&1
echo "gpu bench rc=$? in $left s"
rm -f "$lib_out/bench"/bench.partial.jsonl "$lib_out/bench"/*.png
python3 scripts/bench_runs.py "$lib_out/bench" | tail -n 3
tar -cJf "$out/call.tar.xz" -C "$out" call && rm -rf "$lib_out"
