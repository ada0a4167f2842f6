"""A small run of every native-library entry point on the GPU, for compute-sanitizer.

    PSA_TVM_ARTIFACTS=DIR compute-sanitizer --tool memcheck python scripts/native_smoke.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psa_tvm
import psa_tvm.torch as psa_torch
from psa_tvm import reference
from psa_tvm.runtime import env, native


def main() -> int:
    lib = native.load(env.default_artifacts_dir())
    assert lib is not None, "no native library in the artifact directory"
    nh, kd = 4, 32
    side = torch.cuda.Stream()
    ok = True
    for dtype in (torch.float16, torch.float32):
        for batch, height, width, offset in ((1, 20, 20, 0), (2, 7, 13, 1), (3, 33, 17, 8)):
            n = height * width
            lo = torch.randn(batch * nh * n * kd + offset, device="cuda").to(dtype)[offset:]
            lo = lo.view(batch * nh, n, kd)
            hi = torch.randn(batch * nh, n, kd, device="cuda").to(dtype)
            out = torch.empty(batch, 2 * nh * kd, height, width, device="cuda", dtype=dtype)
            side.wait_stream(torch.cuda.current_stream())  # inputs were made on this stream
            with torch.cuda.stream(side):
                lib.merge_forward(lo, hi, out)
                fresh = psa_tvm.merge(lo, hi, nh, height, width)
                attn = psa_torch.merge_attn(lo, hi, nh, height, width)
                d_lo, d_hi = psa_tvm.merge_backward(out, nh, kd)
                g_lo, g_hi = torch.empty_like(lo), torch.empty_like(hi)
                lib.merge_backward(out, g_lo, g_hi)
            torch.cuda.synchronize()
            expected = reference.merge(lo, hi, nh, height, width)
            ok &= all(torch.equal(t, expected) for t in (out, fresh, attn))
            ok &= all(torch.equal(a, b) for a, b in ((d_lo, lo), (d_hi, hi), (g_lo, lo),
                                                     (g_hi, hi)))
    print("native smoke:", "exact" if ok else "WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
