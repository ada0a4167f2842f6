"""One process's float32 forward against ``copy_`` (40x23, 4 heads of key_dim 32, batch from
the second argument) through the CPU library's kernel, best of 7 timeit repeats; the first
argument imports something first (``none``, ``tvm``, ``compiler`` for psa_tvm.compiler.cpu,
``second`` to load and bind another CPU library, or any module name). Run it several times:
``for i in 1 2 3 4; do python process_probe.py none 1; done``."""

import importlib
import sys
import timeit

import torch

what = sys.argv[1]
if what == "compiler":
    importlib.import_module("psa_tvm.compiler.cpu")
elif what == "second":  # another CPU library, bound to torch's threads (sys.argv[3]: its path)
    import tvm_ffi

    from psa_tvm.runtime import cpu_pool as second_pool

    second = tvm_ffi.load_module(sys.argv[3])
    second_pool.share_torch_threads(sys.argv[3])
elif what != "none":
    importlib.import_module(what)

from psa_tvm.config import OpConfig  # noqa: E402 (after the import under test)
from psa_tvm.runtime import cpu_pool  # noqa: E402
from psa_tvm.runtime.cpu import cpu_kernels  # noqa: E402

kernels = cpu_kernels(OpConfig(32, 4, "float32"))
batch, nh, kd, n = int(sys.argv[2]), 4, 32, 920
lo = torch.randn(batch * nh, n, kd)
hi = torch.randn_like(lo)
out = torch.empty(batch, nh, 2, kd, n)
src, dst = torch.randn(out.numel()), torch.empty(out.numel())
forward = kernels.forward_fn
times = {name: min(timeit.repeat(fn, number=500, repeat=7)) / 500 * 1e6
         for name, fn in (("copy_", lambda: dst.copy_(src)),
                          ("forward", lambda: forward(lo, hi, out, n)))}
print(sys.argv[1:], cpu_pool.launcher_kind(kernels.library.path),
      {k: round(v, 2) for k, v in times.items()}, "ratio",
      round(times["forward"] / times["copy_"], 2))
