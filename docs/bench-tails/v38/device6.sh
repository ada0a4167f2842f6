#!/usr/bin/env bash
# For the next session (not run in v38): every legal kernel at every call of 8-300 MB for the
# test matrix's key_dim 64 (2 heads) and 128 (8 heads) builds of .artifacts43, float32 and
# float16, both passes, every grid: call 3 found their 16-bit backwards at 1.07-1.45x a copy at
# the aligned grids.
#   bash docs/bench-tails/v38/device6.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art43 "$out"
for kh in "64 2" "128 8"; do
  set -- $kh
  timeout 200 python3 docs/bench-tails/v38/proto/oracle38.py "$out/oracle_kd$1.json" float32 \
    float16 --key-dim "$1" --heads "$2" > "$out/oracle_kd$1.log" 2>&1
  echo "kd$1 rc=$?: $(tail -n 1 "$out/oracle_kd$1.log")"
done
