#!/usr/bin/env bash
# Device call 3 of docs/perf.md v38: the 16-bit backward at N % 8 == 0 for the other key_dims
# of .artifacts42 (shifted kernel against the tiled ones), float16.
#   bash docs/bench-tails/v38/device3.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art42 "$out"
for kh in "8 1" "16 3" "64 2" "128 8"; do
  set -- $kh
  timeout 120 python3 docs/bench-tails/v38/proto/oracle38.py "$out/oracle_kd$1.json" float16 \
    --key-dim "$1" --heads "$2" --passes backward --aligned > "$out/oracle_kd$1.log" 2>&1
  echo "kd$1 rc=$?: $(tail -n 1 "$out/oracle_kd$1.log")"
done
