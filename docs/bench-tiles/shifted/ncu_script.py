"""One launch each of the merge (forward, backward) at an odd and an aligned N, float16 and
float32, kd=32, nh=4, batch 16, plus an elementwise copy of the same bytes, for `ncu`
(docs/perf.md v13): the shifted kernels (odd N, artifacts with them) against the tiled ones
(aligned N; or odd N from artifacts built before the shifted kernels existed).

    ncu --metrics gpu__time_duration.sum,sm__inst_executed.sum,lts__t_sectors_op_read.sum,\
lts__t_sectors_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum --csv \
        -k regex:"psa_merge|elementwise" python3 ncu_script.py ARTIFACTS
"""

from __future__ import annotations

import sys

import torch

from psa_tvm import PsaMergeAttnRuntimeOp

KD, NH = 32, 4


def main(artifacts: str) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    for dtype in (torch.float16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        op = PsaMergeAttnRuntimeOp(KD, NH, name, artifacts=artifacts, arch="sm_90")
        for batch, h, w in ((16, 37, 29), (16, 40, 40), (64, 37, 29)):
            n = h * w
            lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=dtype)
            hi = torch.randn_like(lo)
            out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=dtype)
            dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
            src = torch.randn(out.numel(), device="cuda", dtype=dtype)
            dst = torch.empty_like(src)
            op.launch_forward(lo, hi, out, stream, (h, w))
            op.launch_backward(out, dlo, dhi, stream)
            torch.mul(src, 1, out=dst)
            torch.cuda.synchronize()
            print(name, batch, h, w, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
