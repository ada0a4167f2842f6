#!/usr/bin/env bash
# The native library on the GPU host: GPU tests, host time per call, the C++ example, and
# compute-sanitizer memcheck/racecheck over scripts/native_smoke.py. Needs the artifact directory
# (with its psa_tvm_native-*.so, built elsewhere) and apache-tvm-ffi; no TVM.
#   bash scripts/native_gpu.sh ARTIFACT_DIR OUT_DIR [steps...]
#   steps: test host hostcpu cpp memcheck racecheck gputests (default: test host cpp memcheck racecheck)
set -uo pipefail
cd "$(dirname "$0")/.."
art=$(realpath "${1:?artifact directory}"); out=${2:?output directory}; shift 2
steps=${*:-test host cpp memcheck racecheck}
export PSA_TVM_ARTIFACTS=$art PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
mkdir -p "$out"
declare -A result
step() {  # step NAME LIMIT CMD...: full log in OUT/NAME.log, its tail here
  local name=$1 limit=$2; shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log"
  result[$name]=$rc
}
for s in $steps; do
  case $s in
    test) step test 110 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_native.py ;;
    host) step host 50 python3 -m psa_tvm.cli bench --host --device cuda ;;
    hostcpu) step hostcpu 50 python3 -m psa_tvm.cli bench --host --device cpu ;;
    cpp) step cpp 40 bash -c "cmake -S examples/cpp -B /tmp/psa_cpp -DPython_EXECUTABLE=\$(which python3) \
            -Dtvm_ffi_ROOT=\$(python3 -c 'import tvm_ffi.libinfo as l; print(l.find_cmake_path())') > /dev/null \
            && cmake --build /tmp/psa_cpp > /dev/null && /tmp/psa_cpp/psa_native_example $art/psa_tvm_native-*.so cuda \
            && /tmp/psa_cpp/psa_native_example $art/psa_tvm_native-*.so cpu" ;;
    memcheck) step memcheck 45 compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/native_smoke.py ;;
    racecheck) step racecheck 45 compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/native_smoke.py ;;
    gputests) step gputests 120 python3 -m pytest -m gpu -q -p no:cacheprovider -x tests/test_gpu.py ;;
    *) echo "unknown step $s" ;;
  esac
done
echo "== summary (exit codes)"
for s in $steps; do printf '  %-10s %s\n' "$s" "${result[$s]:-not run}"; done
