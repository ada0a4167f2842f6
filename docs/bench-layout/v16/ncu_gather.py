"""The worst gathers under ncu in the bench's condition (each launch right after a 256 MB flush,
ncu's cache flush and clock lock off): qkv_grad_cudnn and attn forward at nh 6, without and with
the register stage (layout_tune --grid stage candidates), and an elementwise copy of the bytes
read + written, at 384/32/20x20 (800-byte NCHW rows) and 384/16/40x40 (3200-byte rows)."""
import sys
from pathlib import Path

import torch

from psa_tvm.layouts import STREAM_OPS
from psa_tvm.runtime.manifest import Manifest
from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp
from psa_tvm.tools.layout_tune import params_key

root = Path(sys.argv[1])
builds = {(b.op, params_key(b.schedule_params)): b for b in Manifest.load(root).builds
          if b.config.num_heads == 6 and b.config.dtype == "float16"}
flush = torch.empty(256 << 18, dtype=torch.int32, device="cuda")
stream = torch.cuda.current_stream().cuda_stream
cases = {"qkv_grad_cudnn": ("t64/256/r4/p16/k2/h/g32", "t64/128/r4/p16/k2/h/g32/s"),
         "attn": ("t64/256/r2/p16/k2", "t64/256/r2/p16/k2/s")}
for batch, size in ((32, 20), (16, 40)):
    n = size * size
    for name, keys in cases.items():
        op = STREAM_OPS[name]
        shapes = op.kernel_shapes("forward", batch, n, 6, 32)
        tensors = {t: torch.randn(s, device="cuda", dtype=torch.float16) for t, s in shapes.items()}
        moved = sum(t.numel() for t in tensors.values())
        src = torch.randn(moved // 2, device="cuda", dtype=torch.float16)
        dst = torch.empty_like(src)
        fns = []
        for key in keys:
            rt = PsaStreamRuntimeOp(name, 32, 6, "float16", artifacts=root)
            rt._builds = {p: builds[name, key] for p in op.passes}
            fns.append(lambda rt=rt, t=tensors, b=batch, n=n: rt.launch("forward", t, b, n, stream))
        fns.append(lambda src=src, dst=dst: torch.mul(src, 1, out=dst))
        for _ in range(3):
            for fn in fns:
                flush.zero_()
                torch.cuda._sleep(20000)
                fn()
        torch.cuda.synchronize()
        print(name, batch, size, keys, flush=True)
