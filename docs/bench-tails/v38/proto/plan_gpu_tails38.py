"""``tests/test_gpu_tails.py``'s launch-rule assertions without a GPU: its ``check_forward`` and
``check_backward`` replaced by ones that only plan (fake 16-byte-aligned pointers plus the
test's element offsets), every other line of the tests as they are. No kernel runs, so nothing
here is a bit-exactness check; it says whether each test expects the kernels an artifact
directory's manifests choose (v38: no device was lent to run the changed tests).

    python3 docs/bench-tails/v38/proto/plan_gpu_tails38.py ARTIFACTS
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import tests.test_gpu_tails as gpu_tails
from psa_tvm.runtime.tensors import TensorInfo

_ADDRESSES = itertools.count(1 << 20, 1 << 30)


def _info(shape: tuple[int, ...], config, offset: int) -> TensorInfo:
    strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return TensorInfo(next(_ADDRESSES) + offset * config.itemsize, shape, strides,
                      config.dtype, "cuda", 0)


def plan_forward(op, config, batch, height, width, offset=0, seed=0):
    half = (batch * config.num_heads, height * width, config.key_dim)
    out = _info((batch, config.channels, height, width), config, 64 + offset)
    return op.plan_forward([_info(half, config, offset), _info(half, config, offset)], out,
                           (height, width)).kernel


def plan_backward(op, config, batch, height, width, offset=0, seed=0):
    grad = _info((batch, config.channels, height, width), config, offset)
    half = (batch * config.num_heads, height * width, config.key_dim)
    return op.plan_backward(grad, [_info(half, config, 64 + offset),
                                   _info(half, config, 64 + offset)]).kernel


def main() -> int:
    artifacts = sys.argv[1]
    gpu_tails.check_forward, gpu_tails.check_backward = plan_forward, plan_backward
    cases = [(gpu_tails.test_every_int32_variant_is_reached_and_bit_exact, gpu_tails.CONFIGS),
             (gpu_tails.test_rectangular_and_odd_grids, gpu_tails.CONFIGS),
             (gpu_tails.test_shifted_kernels_at_every_n, gpu_tails.SHIFTED_CONFIGS),
             (gpu_tails.test_split_shifted_backward_on_both_sides_of_its_size,
              gpu_tails.SPLIT_CONFIGS),
             (gpu_tails.test_whole_row_backward_inside_and_outside_its_rows,
              gpu_tails.WHOLE_CONFIGS)]
    passed = failed = 0
    for test, configs in cases:
        for config in configs:
            try:
                test(artifacts, config)
                passed += 1
            except AssertionError as e:
                failed += 1
                print(f"FAIL {test.__name__}[{config.tag}]: {str(e)[:200]}")
    print(f"{passed} passed, {failed} failed (planning only, {artifacts})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
