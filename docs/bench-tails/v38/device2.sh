#!/usr/bin/env bash
# Device call 2 of docs/perf.md v38: the oracle of call 1 on .artifacts42 (key_dim 32 at 2 and
# 6 heads rebuilt with the params of 4 heads), float32 and float16, then bfloat16.
#   bash docs/bench-tails/v38/device2.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art42 "$out"
timeout 300 python3 docs/bench-tails/v38/proto/oracle38.py "$out/oracle.json" \
  > "$out/oracle.log" 2>&1
echo "oracle rc=$?"; tail -n 1 "$out/oracle.log"
timeout 200 python3 docs/bench-tails/v38/proto/oracle38.py "$out/oracle_bf16.json" bfloat16 \
  > "$out/oracle_bf16.log" 2>&1
echo "oracle bf16 rc=$?"; tail -n 1 "$out/oracle_bf16.log"
