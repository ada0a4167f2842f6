#!/usr/bin/env bash
# Device call 6 of docs/perf.md v37: the GPU band tests at the issue's grids (test_gpu_band.py
# -k issue_grids, with the 20x15 and 20x20 batches added after call 4), which ran out of time
# in call 5, on this round's final artifacts (.gpu/art41.tar.xz).
#   bash docs/bench-tails/v37/device6.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v37/setup.sh art41 "$out"
timeout 420 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_gpu_band.py \
  -k issue_grids --durations=5 > "$out/band_tests.log" 2>&1
echo "band tests rc=$?"
tail -n 12 "$out/band_tests.log"
