"""One launch each, for `ncu` (docs/perf.md v14): the library's merge kernels, the default
shifted kernels (cubin of gen_variants.py, forced at aligned N too) and an elementwise copy of
the same bytes, float16 kd=32 nh=4 at batch 64.

    ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,\
sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum --csv \
        -k regex:"psa_merge|fwd_f|bwd_f|elementwise" python3 ncu_script.py ARTIFACTS CUBIN_DIR
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

from psa_tvm import PsaMergeAttnRuntimeOp

KD, NH = 32, 4
TAG = "f16_f256r2p2g2_b248t256r4"
SHAPES = ((64, 40, 23), (64, 40, 40), (64, 64, 3), (64, 20, 20), (64, 37, 29))


def main(artifacts: str, cubins: str) -> None:
    stream_ptr = torch.cuda.current_stream().cuda_stream
    stream = cp.cuda.ExternalStream(stream_ptr)
    module = cp.RawModule(path=str(Path(cubins) / "shift_float16.cubin"))
    fwd, bwd = module.get_function(f"fwd_{TAG}_kernel"), module.get_function(f"bwd_{TAG}_kernel")
    op = PsaMergeAttnRuntimeOp(KD, NH, "float16", artifacts=artifacts, arch="sm_90")
    for batch, h, w in SHAPES:
        n = h * w
        lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=torch.float16)
        hi = torch.randn_like(lo)
        out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=torch.float16)
        dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
        src = torch.randn(out.numel(), device="cuda", dtype=torch.float16)
        dst = torch.empty_like(src)
        op.launch_forward(lo, hi, out, stream_ptr, (h, w))
        op.launch_backward(out, dlo, dhi, stream_ptr)
        with stream:
            fwd((math.ceil(n / 256), batch * NH * 2, 1), (256, 1, 1),
                (np.uint64(hi.data_ptr()), np.uint64(lo.data_ptr()), np.uint64(out.data_ptr()),
                 np.int32(batch), np.int32(n)))
            bwd((math.ceil(n / 248), batch * NH * 2, 1), (256, 1, 1),
                (np.uint64(dhi.data_ptr()), np.uint64(dlo.data_ptr()), np.uint64(out.data_ptr()),
                 np.int32(batch), np.int32(n)))
        torch.mul(src, 1, out=dst)
        torch.cuda.synchronize()
        print(batch, h, w, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
