"""One launch of each kernel of interest, for `ncu` (docs/perf.md, v11): the tuned TVM merge
(forward, backward) and the slab experiment kernels, float16, kd=32, nh=4, at an aligned N
(16x40x40) and an odd N (16x37x29).

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,... -k regex:"psa_merge|slab" \
        python3 regtile_ncu.py ARTIFACTS CUBIN
"""

from __future__ import annotations

import sys

import cupy as cp
import numpy as np
import torch

from psa_tvm import PsaMergeAttnRuntimeOp

KD, NH = 32, 4


def main(artifacts: str, cubin: str) -> None:
    module = cp.RawModule(path=cubin)
    base = PsaMergeAttnRuntimeOp(KD, NH, "float16", artifacts=artifacts, arch="sm_90")
    op = PsaMergeAttnRuntimeOp(KD, NH, "float16", arch="sm_90", builds=base.builds)
    stream_ptr = torch.cuda.current_stream().cuda_stream
    stream = cp.cuda.ExternalStream(stream_ptr)
    for batch, h, w in ((16, 40, 40), (16, 37, 29)):
        n = h * w
        lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=torch.float16) + 3
        hi = torch.randn_like(lo) - 3
        out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=torch.float16)
        dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
        op.launch_forward(lo, hi, out, stream_ptr, (h, w))
        op.launch_backward(out, dlo, dhi, stream_ptr)
        for name in ("fwd_slab_e2_512", "bwd_slab_e2_512"):
            kernel = module.get_function(name)
            kernel.max_dynamic_shared_size_bytes = 32 * n
            ptrs = ((lo, hi, out) if name.startswith("fwd") else (out, dlo, dhi))
            with stream:
                kernel((2, batch * NH * 2, 1), (512, 1, 1),
                       (*(np.uint64(t.data_ptr()) for t in ptrs), np.int32(n)),
                       shared_mem=32 * n)
        torch.cuda.synchronize()
        print(batch, h, w, "MB per tensor side", out.numel() * 2 / 1e6, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
