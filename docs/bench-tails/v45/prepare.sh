#!/usr/bin/env bash
# v45: everything v44's device plan carries (docs/bench-tails/v44/README.md), rebuilt from a
# fresh checkout: ignored folders do not outlast a session, and v44's were gone by v45. From
# the repository root, with the compiler installed (README: `pip install -e ".[compiler,test]"`):
#   bash docs/bench-tails/v45/prepare.sh
# 1. applies v43's proto/x33_kd128.patch unless it is applied (the GPU tests must check what
#    the artifacts hold), 2. builds .artifacts47 (the tests and yolo11 presets for CUDA and
#    the CPU, then key_dim 32's attention ops: v40's two lines) and .tune44 (proto/bands44.py),
#    3. packs them into .gpu47/ at XZ_OPT=-9e (6.6 MB where xz's default made 15 MB: the builds
#    of a directory share most of their bytes), 4. downloads the GPU host's missing wheels into
#    .whl/ (Python 3.12, ../shared/TVM_NOTES.md), 5. prints what the carry weighs against the
#    64 MiB limit. About 15 minutes on a 2-core guest.
set -euo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # this tree's psa_tvm, even beside an install
t0=$SECONDS
patch=docs/bench-tails/v43/proto/x33_kd128.patch
if git apply --reverse --check "$patch" 2>/dev/null; then
  echo "patch: already applied"
else
  git apply "$patch" && echo "patch: applied (git diff --stat below)" && git diff --stat
fi
rm -rf .artifacts47 .tune44 .gpu47 && mkdir -p .gpu47 .whl
python -m psa_tvm.cli build --preset tests yolo11 --target cuda cpu -j 2 -o .artifacts47
python -m psa_tvm.cli build --key-dim 32 --num-heads 2 4 6 --dtype float16 bfloat16 float32 \
  --attention -j 2 -o .artifacts47
python docs/bench-tails/v44/proto/bands44.py build .tune44 -j 2
echo "built in $((SECONDS - t0)) s"
XZ_OPT=-9e tar -cJf .gpu47/art47.tar.xz .artifacts47
XZ_OPT=-9e tar -cJf .gpu47/tune44.tar.xz .tune44
# The host has torch 2.11, torchvision, CuPy and JAX; it lacks these (v40, v43).
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl apache-tvm-ffi==0.1.15.post2 \
  typing-extensions==4.16.0 ultralytics==8.4.190 ultralytics-thop==2.2.3
ls -l .gpu47 .whl
tree_bytes=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- | tail -n 1 | cut -f1)
carry_bytes=$(du -cb .gpu47 .whl | tail -n 1 | cut -f1)
echo "carry: tree $((tree_bytes >> 20)) MiB + .gpu47 and .whl $((carry_bytes >> 20)) MiB" \
  "= $(((tree_bytes + carry_bytes) >> 20)) of 64 MiB; ready in $((SECONDS - t0)) s"
