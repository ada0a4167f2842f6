#!/usr/bin/env bash
# v43: every GPU test on this round's artifacts, in two calls by file.
#   LIMIT=... bash docs/bench-tails/v43/device2.sh OUT a|b      Carry [".gpu45b", ".whl"].
set -uo pipefail
source docs/bench-tails/v43/lib.sh .gpu45b art45 "$1"
gpu_tests "$2" "${LIMIT:-520}"
