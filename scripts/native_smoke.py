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
    ok &= _layout_family(lib, side)
    print("native smoke:", "exact" if ok else "WRONG")
    return 0 if ok else 1


def _layout_family(lib, side) -> bool:
    """Every op and pass of the attention layout family through stream_run (the library's
    packed entry), on a tail grid; the pack and the attention merge checked against torch."""
    if lib.stream_run is None:
        return True
    from psa_tvm.layouts import STREAM_OPS

    nh, kd, ok = 4, 32, True
    for dtype in (torch.float16, torch.float32):
        batch, height, width = 2, 7, 9
        n = height * width
        for name, op in STREAM_OPS.items():
            for pass_index, pass_ in enumerate(("forward", "backward")):
                if pass_ not in op.passes:
                    continue
                shapes = op.kernel_shapes(pass_, batch, n, nh, kd)
                names = op.tensor_names(pass_)
                tensors = [torch.randn(shapes[t], device="cuda").to(dtype) for t in names[:-1]]
                out = torch.empty(shapes[names[-1]], device="cuda", dtype=dtype)
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    lib.stream_run(lib.stream_ops[name], pass_index, batch, n, nh, kd,
                                   *tensors, out)
                torch.cuda.synchronize()
                if (name, pass_) == ("qkv", "backward"):  # pack: [B,nh,4,kd,N] -> [B,N,nh,4*kd]
                    want = tensors[0].permute(0, 4, 1, 2, 3).reshape(out.shape)
                    ok &= torch.equal(out, want)
                if (name, pass_) == ("attn", "forward"):  # [B,N,nh,2*kd] -> [B,nh,2,kd,N]
                    want = tensors[0].view(batch, n, nh, 2, kd).permute(0, 2, 3, 4, 1)
                    ok &= torch.equal(out, want.reshape(out.shape))
    return ok


if __name__ == "__main__":
    sys.exit(main())
