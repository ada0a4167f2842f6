"""One launch of the tuned merge (forward, backward) and of an elementwise copy of the same
bytes, float32 and float16, kd=32, nh=4, at batch 16 and 64 of an odd N (37x29) and an aligned
one (40x40), for `ncu` (docs/perf.md, v12): whether partial-sector stores cost DRAM traffic
once the output no longer fits in L2 (batch 64: 70-140 MB).

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        -k regex:"psa_merge|elementwise" python3 oddn_dram_ncu.py ARTIFACTS
"""

from __future__ import annotations

import sys

import torch

from psa_tvm import PsaMergeAttnRuntimeOp

KD, NH = 32, 4


def main(artifacts: str) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    for dtype in (torch.float32, torch.float16):
        name = str(dtype).removeprefix("torch.")
        op = PsaMergeAttnRuntimeOp(KD, NH, name, artifacts=artifacts, arch="sm_90")
        for batch, h, w in ((16, 37, 29), (64, 37, 29), (64, 40, 40)):
            n = h * w
            lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=dtype)
            hi = torch.randn_like(lo)
            out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=dtype)
            dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
            src = torch.randn(out.numel(), device="cuda", dtype=dtype)
            dst = torch.empty_like(src)
            op.launch_forward(lo, hi, out, stream, (h, w))
            op.launch_backward(out, dlo, dhi, stream)
            torch.mul(src, 1, out=dst)  # an elementwise copy: the same bytes, one kernel
            torch.cuda.synchronize()
            print(name, batch, h, w, "MB per side", out.numel() * out.element_size() / 1e6,
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
