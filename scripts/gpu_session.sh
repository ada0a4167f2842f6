#!/usr/bin/env bash
# Everything the GPU host does, from one artifact directory built elsewhere (no TVM needed here):
# finish tuning (resumable), write schedules/sm_90.json, GPU tests, sanitizer sweep, benchmark.
#   bash scripts/gpu_session.sh ARTIFACT_DIR OUT_DIR [steps...]   steps: tune test sanitize bench
set -uo pipefail
cd "$(dirname "$0")/.."
art=${1:?artifact directory}; out=${2:?output directory}; shift 2
steps=${*:-tune test sanitize bench}
export PSA_TVM_ARTIFACTS=$art PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p "$out"
status=0
run() { echo "== $*"; "$@" || { echo "== FAILED ($?): $*"; status=1; }; }
logged() {  # logged LOG CMD...: full output to LOG, its tail to the terminal
  local log=$1; shift
  echo "== $*"
  "$@" > "$log" 2>&1 || { echo "== FAILED: $*"; status=1; }
  grep -v "^|" "$log" | tail -n 40
}
for step in $steps; do
  case $step in
    tune) run python3 scripts/tune.py run --artifacts "$art"
          run python3 scripts/tune.py select --artifacts "$art" -o schedules/sm_90.json
          cp schedules/sm_90.json "$art/results.jsonl" "$out/" ;;
    test) logged "$out/pytest.log" python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_gpu.py ;;
    sanitize) logged "$out/sanitize.log" bash scripts/sanitize.sh ;;
    bench) logged "$out/bench.log" python3 scripts/bench.py --out "$out/bench" ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done
exit $status
