#!/usr/bin/env bash
# On the 2-core guest, with the README's venv active: everything the next device session
# carries, built in one go (about 30 minutes; the checkout comes bare each session):
#   .whl/   the wheels the GPU host lacks (../shared/TVM_NOTES.md)
#   .gpu41/tune41.tar.xz   v41's candidates (t64 t128 s64 s128 s32 b32 t32), for v41's device1.sh
#   .gpu42/tune42.tar.xz   v42's band candidates (b64_* b128_*), for v42's device1.sh
#   bash docs/bench-tails/v42/proto/prepare.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d .whl \
  apache-tvm-ffi==0.1.15.post2 typing-extensions ultralytics==8.4.190 ultralytics-thop
python3 docs/bench-tails/v41/proto/tune41.py build .tune41 tsb -j 2
python3 docs/bench-tails/v42/proto/bands42.py build .tune42 -j 2
# the candidates' .cu sources stay here (the device times the fatbins)
pack() {  # pack DIR TARBALL
  mkdir -p "$(dirname "$2")"
  tar -cf - --exclude='*.cu' --exclude='.manifest.lock' --sort=name "$1" | xz -9 -T2 > "$2"
  echo "$2: $(du -h "$2" | cut -f1)"
}
pack .tune41 .gpu41/tune41.tar.xz
pack .tune42 .gpu42/tune42.tar.xz
