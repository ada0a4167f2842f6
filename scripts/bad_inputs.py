"""Try every kind of bad input on the CPU and print the error each one gets, as a markdown table.

    python scripts/bad_inputs.py > /tmp/table.md     # the table in docs/reliability.md

Each case also checks that no tensor it was given (outputs included) was written;
tests/test_validation.py asserts the same behaviour case by case.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psa_tvm

NH, KD, B, H, W = 1, 8, 2, 3, 5  # kd8_nh1 is in the `tests` preset


def half(**kw):
    return torch.randn(B * NH, H * W, KD, **kw) + 2


def merged(**kw):
    return torch.randn(B, 2 * NH * KD, H, W, **kw) + 2


WATCHED: list[torch.Tensor] = []  # every tensor a case could write


def cases():
    lo, hi, out = half(), half(), merged()
    shared = torch.randn(3 * lo.numel())
    WATCHED.extend([lo, hi, out, shared])
    fwd = psa_tvm.merge
    yield "lo of rank 2", lambda: fwd(lo[0], hi, NH, H, W, out=out)
    yield "lo/hi shapes differ", lambda: fwd(lo, hi[:, :-1], NH, H, W, out=out)
    yield "lo/hi dtypes differ", lambda: fwd(lo, hi.half(), NH, H, W, out=out)
    yield "N != H*W", lambda: fwd(lo, hi, NH, H + 1, W, out=out)
    yield "batch not divisible by num_heads", lambda: fwd(lo, hi, 3, H, W, out=out)
    yield "unsupported dtype (float64)", lambda: fwd(lo.double(), hi.double(), NH, H, W)
    yield "unsupported dtype (int32)", lambda: fwd(lo.int(), hi.int(), NH, H, W)
    yield "non-contiguous lo", lambda: fwd(lo.transpose(0, 1).contiguous().transpose(0, 1),
                                           hi, NH, H, W, out=out)
    yield "negatively strided lo (numpy)", lambda: fwd(lo.numpy()[::-1], hi.numpy(), NH, H, W,
                                                       out=out.numpy())
    yield "out of the wrong shape", lambda: fwd(lo, hi, NH, H, W, out=out[:, :-1])
    yield "out of the wrong dtype", lambda: fwd(lo, hi, NH, H, W, out=out.half())
    yield "out overlapping lo", lambda: fwd(shared[: lo.numel()].view(lo.shape), hi, NH, H, W,
                                            out=shared[lo.numel() // 2:][: out.numel()]
                                            .view(out.shape))
    yield "num_heads = 0", lambda: fwd(lo, hi, 0, H, W, out=out)
    yield "num_heads = True", lambda: fwd(lo, hi, True, H, W, out=out)
    bwd = psa_tvm.merge_backward
    yield "d_merged of rank 2", lambda: bwd(out[0, 0], NH, KD)
    yield "d_merged channels != 2*nh*kd", lambda: bwd(out, NH, KD + 1)
    yield "d_lo and d_hi the same tensor", lambda: bwd(out, NH, KD, d_lo=lo, d_hi=lo)
    op = psa_tvm.PsaMergeAttnRuntimeOp(KD, NH, "float32", schedule="tiled",
                                       artifacts=os.environ.get("PSA_TVM_ARTIFACTS",
                                                                ".artifacts"), arch="sm_90")
    yield "RuntimeOp: CPU tensors to a CUDA launch", lambda: op.launch_forward(lo, hi, out)
    yield "RuntimeOp: key_dim of another build", lambda: op.grid([(0, (4, 15, 16))] * 2)
    yield "RuntimeOp: grid past CUDA limits", lambda: op.grid([(0, (2**20 * NH, 64, KD))] * 2)
    yield "RuntimeOp: (ptr, shape) not element-aligned", lambda: op.pack_args(
        [(4098, (B * NH, H * W, KD)), (8192, (B * NH, H * W, KD))], (1 << 20, (B, 32, 15)),
        psa_tvm.RecordingVisitor())


def main() -> int:
    print("| bad input | error | message | output untouched |")
    print("|---|---|---|---|")
    for name, call in cases():
        before = [t.clone() for t in WATCHED]
        try:
            call()
            error, message = "none", "(accepted)"
        except (TypeError, ValueError) as err:
            error, message = type(err).__name__, str(err).replace("|", "\\|")
        untouched = all(torch.equal(t, b) for t, b in zip(WATCHED, before, strict=True))
        print(f"| {name} | {error} | {message} | {'yes' if untouched else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
