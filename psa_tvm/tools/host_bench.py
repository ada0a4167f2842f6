"""Host time per call of every launch path, beside torch's ``copy_`` in the same process.

``psa-tvm bench --host [--device cuda|cpu]``. The GPU numbers are the issue's targets (B=1,
20x20, float16, kd=32, nh=4: the native library with ``out`` given <= 0.8x ``copy_``,
``merge_attn`` eager no-grad <= 1.0x, with autograd recording <= 2.0x, ``psa_tvm.merge``
allocating <= 1.2x); on the CPU, ``psa_tvm.merge`` on a tiny shape against the CPU ``copy_``.
Loops of asynchronous calls with one synchronisation at the end; each path is timed in several
interleaved rounds. A path's ratio is the median over rounds of its time / ``copy_``'s time in
the same round: on a shared host the speed of the CPU moves between rounds (``copy_`` moved
6.2-10.5 us across runs on the H200 host), and a ratio of one round's neighbours cancels that.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext

import torch

import psa_tvm
import psa_tvm.torch as psa_torch
from psa_tvm import reference
from psa_tvm.runtime import env, torch_ext
from psa_tvm.runtime import native as native_rt

_WITHOUT = ", without the torch extension"


def _per_call(fn: Callable[[], object], calls: int, sync: Callable[[], None]) -> float:
    for _ in range(20):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def host_table(device: str = "cuda", *, batch: int = 1, height: int = 20, width: int = 20,
               key_dim: int = 32, num_heads: int = 4, dtype: str = "float16",
               calls: int = 2000, rounds: int = 9) -> dict[str, tuple[float, float]]:
    """Per path, by name (``torch copy_`` first): the median host microseconds per call and
    the median over rounds of the ratio to ``copy_`` in the same round."""
    torch_dtype = getattr(torch, dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    lo = torch.randn(batch * num_heads, height * width, key_dim, device=device,
                     dtype=torch_dtype)
    hi = torch.randn_like(lo)
    out = torch.empty(batch, 2 * num_heads * key_dim, height, width, device=device,
                      dtype=torch_dtype)
    src = torch.randn_like(out)
    lo_grad, hi_grad = lo.clone().requires_grad_(), hi.clone().requires_grad_()
    lib = native_rt.load(env.default_artifacts_dir())
    args = (lo, hi, num_heads, height, width)
    paths: dict[str, Callable[[], object]] = {
        _COPY: lambda: out.copy_(src),
        "eager stack+permute+reshape": lambda: reference.merge(*args),
        "torch.add (one allocating eager op)": lambda: torch.add(lo, hi),
        "torch.empty_like(out)": lambda: torch.empty_like(out),
        "psa_tvm.merge(out=)": lambda: psa_tvm.merge(*args, out=out),
        "psa_tvm.merge (allocating)": lambda: psa_tvm.merge(*args),
        "merge_attn eager, no grad": lambda: psa_torch.merge_attn(*args),
        "merge_attn, autograd recording": lambda: psa_torch.merge_attn(
            lo_grad, hi_grad, num_heads, height, width),
        "torch.ops.psa_tvm.merge_attn (dispatcher), no grad": lambda: (
            torch.ops.psa_tvm.merge_attn(*args)),
    }
    if lib is not None:
        paths = {**dict(list(paths.items())[:4]),
                 "native merge_forward(lo, hi, out)": lambda: lib.merge_forward(lo, hi, out),
                 "native merge(..., out)": lambda: lib.merge(*args, out),
                 "native merge(..., None) (allocating)": lambda: lib.merge(*args, None),
                 **dict(list(paths.items())[4:])}
    extension = (torch_ext.module_for(lib.path, may_build=device == "cuda")
                 if lib is not None else None)
    if extension is not None:  # the public paths above take it; the same without it:
        for name in ("psa_tvm.merge (allocating)", "merge_attn eager, no grad",
                     "merge_attn, autograd recording"):
            paths[f"{name}{_WITHOUT}"] = paths[name]
    if device == "cuda":
        op = psa_tvm.PsaMergeAttnRuntimeOp(key_dim, num_heads, dtype)
        stream = torch.cuda.current_stream().cuda_stream
        paths["RuntimeOp.launch_forward (cuda-python)"] = lambda: op.launch_forward(
            lo, hi, out, stream, (height, width))
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            # "no grad" paths run under a no_grad region around the loop, as in inference code
            # (entering one per call would time torch.no_grad itself)
            without = torch_ext.suspended() if name.endswith(_WITHOUT) else nullcontext()
            with torch.set_grad_enabled("no grad" not in name), without:
                samples[name].append(_per_call(fn, calls, sync))
    copies = samples[_COPY]
    return {name: (statistics.median(values),
                   statistics.median(v / c for v, c in zip(values, copies, strict=True)))
            for name, values in samples.items()}


_COPY = "torch copy_ (same bytes)"


def print_table(device: str, table: dict[str, tuple[float, float]], shape: str) -> None:
    print(f"host time per call on {device} ({shape}); median us per call, median per-round "
          "ratio to torch copy_")
    for name, (us, ratio) in table.items():
        print(f"  {name:52s} {us:8.2f} us  {ratio:5.2f}x")


def main_host(device: str, shapes: list[tuple[int, int, int]] | None = None) -> int:
    shapes = shapes or ([(1, 20, 20)] if device == "cuda" else [(1, 2, 2), (1, 20, 20)])
    for batch, height, width in shapes:
        table = host_table(device, batch=batch, height=height, width=width)
        print_table(device, table, f"B={batch}, {height}x{width}, float16, kd=32, nh=4")
    return 0
