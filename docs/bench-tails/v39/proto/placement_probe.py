"""The float32 forward through ``psa_tvm.merge`` with ``out`` placed at other offsets from
``lo`` modulo 4096 (4K aliasing between the stores and the next loads?), per-round ratio to
``copy_`` (7 rounds, the median), bit-exact checked: ``python placement_probe.py H W B``."""

import statistics
import sys

import torch

import psa_tvm
from psa_tvm import ops
from psa_tvm.tools.bench import _wall_us

HEIGHT, WIDTH, BATCH = (int(a) for a in sys.argv[1:4])
NH, KD = 4, 32
PAGE = 4096


def median_us(fn, reps: int = 30) -> float:
    """The benchmark's CPU timer (3 warm-up calls, the median of ``reps``) in us."""
    return _wall_us(fn, reps)


def main() -> None:
    torch.manual_seed(0)
    n = HEIGHT * WIDTH
    half = BATCH * NH * n * KD  # elements of lo (and of hi)
    half_pages = (half * 4 + PAGE - 1) // PAGE * PAGE
    pool = torch.empty((2 * half_pages + PAGE + 4 * half * 4 + 2 * PAGE) // 4)
    base = (PAGE - pool.data_ptr() % PAGE) % PAGE  # bytes to the first page boundary

    def carve(offset: int, numel: int) -> torch.Tensor:
        return pool[offset // 4:offset // 4 + numel]

    lo = carve(base, half).view(BATCH * NH, n, KD).copy_(torch.randn(BATCH * NH, n, KD))
    hi = carve(base + half_pages, half).view(BATCH * NH, n, KD).copy_(torch.randn_like(lo))
    out_base = base + 2 * half_pages + PAGE
    src, dst = torch.randn(2 * half), torch.empty(2 * half)
    for delta in (0, 32, 64, 96, 256, 512, 1024, 2048, 3072, 4032):
        out = carve(out_base + delta, 2 * half).view(BATCH, 2 * NH * KD, HEIGHT, WIDTH)
        out.fill_(float("nan"))
        psa_tvm.merge(lo, hi, NH, HEIGHT, WIDTH, out=out)
        assert torch.equal(out, psa_tvm.reference.merge(lo, hi, NH, HEIGHT, WIDTH))
        ratios = []
        for _ in range(7):
            copy_us = median_us(lambda: dst.copy_(src))
            ratios.append(median_us(
                lambda o=out: psa_tvm.merge(lo, hi, NH, HEIGHT, WIDTH, out=o)) / copy_us)
        print(f"out - lo = {delta:5d} mod {PAGE}: forward / copy_ {statistics.median(ratios):.2f}"
              f" (min {min(ratios):.2f})", flush=True)
    print("native library:", bool(ops._NATIVE))


if __name__ == "__main__":
    main()
