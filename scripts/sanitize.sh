#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over every schedule x dtype x tail shape.
# Fails on any sanitizer report or wrong result. Run on the GPU host:
#   PSA_TVM_ARTIFACTS=.artifacts bash scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PSA_TVM_ARTIFACTS="${PSA_TVM_ARTIFACTS:-.artifacts}"
status=0
# cuda-python probes the driver for optional entry points (cuGetProcAddress -> INVALID_VALUE)
# when it loads; those API-error reports are not memory errors, and every driver call psa-tvm
# makes has its result checked in psa_tvm/runtime/launcher.py, so API errors are not reported.
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  if ! compute-sanitizer --tool "$tool" --error-exitcode 99 --report-api-errors no \
      python3 scripts/sweep.py "$@"; then
    echo "== $tool: FAILED"; status=1
  else
    echo "== $tool: 0 reports"
  fi
done
exit $status
