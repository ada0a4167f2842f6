#!/usr/bin/env bash
# Device call 7 of docs/perf.md v37: scripts/sweep_batches.py (sweep37.py made a tool) on this
# round's final artifacts (.gpu/art41.tar.xz), its GPU test, and the full default sweep.
#   bash docs/bench-tails/v37/device7.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art41 "$out"
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_sweep_batches.py \
  > "$out/test.log" 2>&1
echo "test rc=$?: $(tail -n 1 "$out/test.log")"
timeout 150 python3 scripts/sweep_batches.py --out "$out/sweep.json" > "$out/sweep.log" 2>&1
echo "sweep rc=$?"
tail -n 32 "$out/sweep.log"
