#!/usr/bin/env bash
# Device call 1 of docs/perf.md v38: every legal full-width kernel of v37's final artifacts
# (.gpu/art41.tar.xz) at every call of the default sweep, beside the one the runtime chooses.
#   bash docs/bench-tails/v38/device1.sh OUT
set -uo pipefail
out=$1
source docs/bench-tails/v38/setup.sh art41 "$out"
timeout 420 python3 docs/bench-tails/v38/proto/oracle38.py "$out/oracle.json" \
  > "$out/oracle.log" 2>&1
echo "oracle rc=$?"
tail -n 3 "$out/oracle.log"
