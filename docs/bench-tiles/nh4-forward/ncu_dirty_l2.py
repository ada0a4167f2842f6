"""The bench's condition under ncu: each launch right after the 256 MB zero_() flush (L2 full of
dirty lines), ncu's own cache flush and clock lock off. Tuned merge fwd/bwd and an elementwise
copy, float16, kd=32 nh=4, at 64x40x23 (1.11x in the bench, 1.03x under ncu's clean flush),
64x40x40 and 64x64x3 (aligned)."""
import sys
import torch
from psa_tvm import PsaMergeAttnRuntimeOp

KD, NH = 32, 4
flush = torch.empty(256 << 18, dtype=torch.int32, device="cuda")
stream = torch.cuda.current_stream().cuda_stream
op = PsaMergeAttnRuntimeOp(KD, NH, "float16", artifacts=sys.argv[1], arch="sm_90")
for batch, h, w in ((64, 40, 23), (64, 40, 40), (64, 64, 3)):
    n = h * w
    lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=torch.float16)
    hi = torch.randn_like(lo)
    out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=torch.float16)
    dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
    src = torch.randn(out.numel(), device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    for rep in range(3):
        for fn in (lambda: op.launch_forward(lo, hi, out, stream, (h, w)),
                   lambda: op.launch_backward(out, dlo, dhi, stream),
                   lambda: torch.mul(src, 1, out=dst)):
            flush.zero_()
            torch.cuda._sleep(20000)
            fn()
    torch.cuda.synchronize()
    print(batch, h, w, flush=True)
