"""Run forward and backward of every schedule over a shape sweep with tails, checking each result.

Small on purpose: it is the workload of ``scripts/sanitize.sh`` (compute-sanitizer memcheck and
racecheck) and of ``ncu`` profiling. Exit status 1 on any wrong result.

    PSA_TVM_ARTIFACTS=.artifacts python scripts/sweep.py [--schedules tiled] [--dtypes float16]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from psa_tvm import PsaMergeAttnRuntimeOp, reference
from psa_tvm.config import OpConfig

SHAPES = ((1, 1, 1), (1, 7, 13), (2, 20, 20), (3, 5, 3), (1, 33, 17))
CONFIGS = ((8, 1), (32, 4), (128, 8))


def int_tuples(form: str):
    """An option's type: ``"a,b;a,b"`` of ints, each group shaped like ``form`` (the values
    themselves are checked where they are used, by ``OpConfig`` and the op)."""
    size = len(form.split(","))

    def parse(text: str) -> list[tuple[int, ...]]:
        try:
            groups = [tuple(int(x) for x in part.split(",")) for part in text.split(";")]
        except ValueError:
            groups = []
        if not groups or any(len(g) != size for g in groups):
            raise argparse.ArgumentTypeError(
                f"expected {form};{form} (ints), got {text!r}")
        return groups
    return parse


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifacts", default=os.environ.get("PSA_TVM_ARTIFACTS", ".artifacts"))
    parser.add_argument("--schedules", nargs="+", default=["rowwise", "tiled"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    parser.add_argument("--shapes", default=SHAPES, type=int_tuples("B,H,W"),
                        help="B,H,W;B,H,W (default: the tail sweep)")
    parser.add_argument("--configs", default=CONFIGS, type=int_tuples("KD,NH"),
                        help=f"KD,NH;KD,NH (default: {';'.join(f'{k},{n}' for k, n in CONFIGS)})")
    args = parser.parse_args()
    shapes, configs = args.shapes, args.configs
    stream = torch.cuda.current_stream().cuda_stream
    runs = failures = 0
    for schedule in args.schedules:
        for dtype in args.dtypes:
            for key_dim, num_heads in configs:
                config = OpConfig(key_dim, num_heads, dtype)
                op = PsaMergeAttnRuntimeOp(key_dim, num_heads, dtype, schedule=schedule,
                                           artifacts=args.artifacts)
                tdtype = getattr(torch, dtype)
                for batch, height, width in shapes:
                    rows, n = batch * num_heads, height * width
                    lo = torch.randn(rows, n, key_dim, device="cuda").to(tdtype) + 2
                    hi = torch.randn(rows, n, key_dim, device="cuda").to(tdtype) - 2
                    out = torch.full((batch, config.channels, height, width), float("nan"),
                                     device="cuda", dtype=tdtype)
                    op.launch_forward(lo, hi, out, stream, (height, width))
                    grad = torch.randn(out.shape, device="cuda").to(tdtype) + 2
                    d_lo = torch.full_like(lo, float("nan"))
                    d_hi = torch.full_like(hi, float("nan"))
                    op.launch_backward(grad, d_lo, d_hi, stream)
                    ref_lo, ref_hi = reference.merge_backward(grad, num_heads, key_dim)
                    ok = (torch.equal(out, reference.merge(lo, hi, num_heads, height, width))
                          and torch.equal(d_lo, ref_lo) and torch.equal(d_hi, ref_hi))
                    runs += 2
                    if not ok:
                        failures += 1
                        print(f"WRONG: {schedule} {config.tag} B={batch} H={height} W={width}")
    torch.cuda.synchronize()
    print(f"sweep: {runs} launches, {failures} wrong results")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
