#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over every schedule x dtype x tail shape.
# Fails on any sanitizer report or wrong result. Run on the GPU host:
#   PSA_TVM_ARTIFACTS=.artifacts bash scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PSA_TVM_ARTIFACTS="${PSA_TVM_ARTIFACTS:-.artifacts}"
status=0
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  if ! compute-sanitizer --tool "$tool" --error-exitcode 99 --target-processes all \
      python3 scripts/sweep.py "$@"; then
    echo "== $tool: FAILED"; status=1
  else
    echo "== $tool: 0 reports"
  fi
done
exit $status
