#!/usr/bin/env bash
# Everything the GPU host runs, from one artifact directory built elsewhere (no TVM there):
#   bash scripts/gpu_session.sh ARTIFACT_DIR OUT_DIR [steps...]
# steps (default: test native bench host attention):
#   tune       finish tuning (resumable) and write schedules/sm_90.json
#   test       every @pytest.mark.gpu test (merge, tails, native library, attention, ultralytics,
#              2-GPU DDP where two GPUs are visible)
#   native     the C++ example (CUDA and CPU) and compute-sanitizer memcheck/racecheck over the
#              native library (scripts/native_smoke.py)
#   sanitize   compute-sanitizer over every schedule x dtype x tail shape (Python launcher)
#   bench      the merge benchmark: YOLO and tail grids, profiler times beside event times
#   host       host time per call of every launch path against torch copy_, CUDA and CPU
#   attention  the PSA attention benchmark (core and C2PSA block, stock vs flash vs cuDNN)
# Each step has a time limit (seconds, after the name below) so that the whole session fits one
# device call; its full log is OUT_DIR/<step>.log, and a summary of exit codes is printed last.
# The test step alone fills most of a call (the suite took 316 s in v29, 468 s in v30 on
# another H200): give it a call of its own.
set -uo pipefail
cd "$(dirname "$0")/.."
art=$(realpath "${1:?artifact directory}"); out=${2:?output directory}; shift 2
steps=${*:-test native bench host attention}
export PSA_TVM_ARTIFACTS=$art PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$out"
declare -A result
step() {  # step NAME LIMIT CMD...: full log in OUT/NAME.log, the tail of it here
  local name=$1 limit=$2; shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  result[$name]=$?
  grep -v "^|" "$out/$name.log" | tail -n 25
}
native_example() {
  local cmake_dir
  cmake_dir=$(python3 -c 'import tvm_ffi.libinfo as l; print(l.find_cmake_path())')
  cmake -S examples/cpp -B /tmp/psa_cpp -DPython_EXECUTABLE="$(which python3)" \
    -Dtvm_ffi_ROOT="$cmake_dir" > /dev/null && cmake --build /tmp/psa_cpp > /dev/null &&
  /tmp/psa_cpp/psa_native_example "$art"/psa_tvm_native-*.so cuda &&
  /tmp/psa_cpp/psa_native_example "$art"/psa_tvm_native-*.so cpu
}
native_sanitizer() {
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/native_smoke.py &&
  compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/native_smoke.py
}
for s in $steps; do
  case $s in
    tune) step tune 600 bash -c "python3 scripts/tune.py run --artifacts '$art' &&
            python3 scripts/tune.py select --artifacts '$art' -o schedules/sm_90.json --update &&
            cp schedules/sm_90.json '$out/'" ;;
    test) step test 560 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests ;;
    native) step native 80 bash -c "$(declare -f native_example native_sanitizer);
            art='$art'; native_example && native_sanitizer" ;;
    sanitize) step sanitize 300 bash scripts/sanitize.sh ;;
    bench) step bench 90 python3 scripts/bench.py --quick --out "$out/bench" ;;
    host) step host 40 bash -c "python3 -m psa_tvm.cli bench --host --device cuda &&
            python3 -m psa_tvm.cli bench --host --device cpu" ;;
    attention) step attention 100 python3 -m psa_tvm.cli bench --attention \
                 --out "$out/attention" --budget-s 80 ;;
    *) echo "unknown step $s"; result[$s]=2 ;;
  esac
done
echo "== summary (exit codes; logs in $out)"
status=0
for s in $steps; do
  printf '  %-10s %s\n' "$s" "${result[$s]:-not run}"
  [ "${result[$s]:-1}" = 0 ] || status=1
done
exit $status
