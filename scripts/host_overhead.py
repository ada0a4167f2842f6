"""Host (Python) time per call of each launch path, against one eager torch op; GPU host.

    PSA_TVM_ARTIFACTS=.artifacts python scripts/host_overhead.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psa_tvm
import psa_tvm.torch as psa_torch
from psa_tvm.tools.timing import host_us_per_call


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    nh, kd, batch, height, width = 4, 32, 1, 20, 20
    lo = torch.randn(batch * nh, height * width, kd, device="cuda", dtype=torch.float16)
    hi = torch.randn_like(lo)
    out = torch.empty(batch, 2 * nh * kd, height, width, device="cuda", dtype=torch.float16)
    op = psa_tvm.PsaMergeAttnRuntimeOp(kd, nh, "float16")
    stream = torch.cuda.current_stream().cuda_stream
    paths = {
        "torch.add (one eager op)": lambda: torch.add(lo, hi),
        "RuntimeOp.launch_forward": lambda: op.launch_forward(lo, hi, out, stream,
                                                              (height, width)),
        "psa_tvm.merge": lambda: psa_tvm.merge(lo, hi, nh, height, width),
        "psa_tvm.torch.merge_attn": lambda: psa_torch.merge_attn(lo, hi, nh, height, width),
    }
    op.launch_forward(lo, hi, out, stream, (height, width))
    launch = next(iter(op._checked.values()))
    from cuda.bindings import driver

    from psa_tvm.runtime.tensors import tensor_info

    parts = {
        "  tensor_info(torch)": lambda: tensor_info(lo, "lo"),
        "  torch raw current stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "  cuCtxGetCurrent": driver.cuCtxGetCurrent,
        "  cuLaunchKernel (cuda-python)": lambda: driver.cuLaunchKernel(
            launch.func, *launch.plan.grid, *launch.plan.block, 0, stream, launch.args.address,
            0),
        "  lo.new_empty": lambda: lo.new_empty(out.shape),
    }
    launcher = launch.launcher
    parts["  CudaLauncher.launch (context check + launch)"] = lambda: launcher.launch(
        launch.func, launch.plan.grid, launch.plan.block, 0, stream, launch.args, 0)
    for name, fn in {**paths, **parts}.items():
        print(f"{name:45s} {host_us_per_call(fn):7.2f} us/call")

    if args.profile:
        fn = paths["psa_tvm.torch.merge_attn"]
        profile = cProfile.Profile()
        profile.runcall(lambda: [fn() for _ in range(2000)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
