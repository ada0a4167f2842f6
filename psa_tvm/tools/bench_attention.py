"""``psa-tvm bench --attention``: the PSA attention core and the whole C2PSA block.

Implementations of the core (input: the ``qkv`` conv output, output: ``[B, nh*2*kd, H, W]``):

- ``stock``: ultralytics' matmul + softmax;
- ``sdpa_eager``: q, k, v copied into contiguous ``[B, nh, N, d]`` tensors in eager, one
  ``F.scaled_dot_product_attention`` (torch's backend choice), the output merged in eager;
- ``flash`` and ``cudnn``: :func:`psa_tvm.attention.psa_attention`.

Each core case runs with ``qkv`` as the NCHW conv output and, ``--qkv-formats channels_last``,
in channels_last memory (a channels_last model), where psa_attention packs nothing.

Per case: GPU kernel time per call (sum of the kernels torch.profiler records) and wall time per
call (a hot loop, one synchronisation at the end), in inference and for a training step
(forward + backward to ``qkv``). For the fused paths, the share of the layout work in the GPU
time: every kernel that is not the attention library's (pack and merge; with a channels_last
``qkv`` the join of flash's halves and the gradient's sums). The C2PSA block (ultralytics',
when importable) stock vs patched. Needs a CUDA GPU and artifacts holding the layout family for
the configurations (``psa-tvm build --attention``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from psa_tvm.attention import psa_attention, reference_attention
from psa_tvm.config import DTYPE_ITEMSIZE
from psa_tvm.runtime import env
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

IMPLS = ("stock", "sdpa_eager", "flash", "cudnn")
FUSED_IMPLS = ("flash", "cudnn")  # psa_attention's paths: their layout share is recorded
# (dim, batch, H=W): the reference shapes first, then the YOLO grid.
TARGET_SHAPES = ((384, 16, 40), (256, 8, 80), (384, 32, 20))
GRID_SHAPES = tuple((256, b, s) for s in (20, 40, 80) for b in (1, 16, 64))
LAYOUT_MIN_BYTES = 8e6  # issue 10: the layout kernels' target holds from 8 MB moved
STOCK_MAX_SCORES = 24e9  # elements of B*nh*N*N beyond which stock is skipped (memory)
QKV_FORMATS = ("nchw", "channels_last")
# Kernel names of the attention libraries (flash, cuDNN and its workspace memset): what is not
# one of these, in a fused path, is layout work.
ATTENTION_KERNEL_MARKS = ("pytorch_flash::", "cudnn", "fmha", "Memset")


def layout_bytes(dim: int, batch: int, size: int, dtype: str) -> float:
    """Bytes the largest layout kernel of a shape moves (read + write): the pack of ``qkv``,
    ``[B, 2*dim, H, W]`` each way. (Records carry their own ``mbytes``.)"""
    return 2 * batch * 2 * dim * size * size * DTYPE_ITEMSIZE[dtype]


def _eager_sdpa(qkv: torch.Tensor, nh: int, kd: int, height: int, width: int) -> torch.Tensor:
    b = qkv.shape[0]
    x = qkv.view(b, nh, 4 * kd, height * width).transpose(-2, -1)
    q, k, v = x[..., :kd].contiguous(), x[..., kd:2 * kd].contiguous(), x[..., 2 * kd:].contiguous()
    o = F.scaled_dot_product_attention(q, k, v, scale=kd ** -0.5)
    return o.transpose(-2, -1).reshape(b, nh * 2 * kd, height, width)


def core_fn(impl: str) -> Callable:
    if impl == "stock":
        return reference_attention
    if impl == "sdpa_eager":
        return _eager_sdpa
    return lambda qkv, nh, kd, h, w: psa_attention(qkv, nh, kd, h, w, impl)


def kernel_times(fn: Callable[[], object], iters: int) -> tuple[float, dict[str, float]]:
    """GPU time per call (us) from torch.profiler, and per kernel name."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] = (per_kernel.get(event.name, 0.0)
                                      + event.time_range.elapsed_us() / iters)
    return sum(per_kernel.values()), per_kernel


def wall_us(fn: Callable[[], object], iters: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def _iters(fn: Callable[[], object], target_s: float = 0.15) -> int:
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = time.perf_counter() - start
    return int(min(50, max(3, target_s / max(once, 1e-6))))


def layout_us(kernels: dict[str, float]) -> float:
    """GPU time per call of the kernels that are not the attention library's."""
    return sum(t for name, t in kernels.items()
               if not any(mark in name for mark in ATTENTION_KERNEL_MARKS))


def bench_core(dim: int, batch: int, size: int, dtype: torch.dtype, mode: str,
               qkv_format: str = "nchw", impls=IMPLS) -> list[dict]:
    nh = max(dim // 64, 1)
    kd = dim // nh // 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(batch, 4 * nh * kd, size, size, device="cuda", dtype=dtype, generator=gen)
    grad = torch.randn(batch, 2 * nh * kd, size, size, device="cuda", dtype=dtype,
                       generator=gen)
    if qkv_format == "channels_last":
        qkv = qkv.contiguous(memory_format=torch.channels_last)
        grad = grad.contiguous(memory_format=torch.channels_last)
    records = []
    for impl in impls:
        record = {"part": "core", "impl": impl, "dim": dim, "batch": batch, "size": size,
                  "dtype": str(dtype).removeprefix("torch."), "mode": mode,
                  "qkv_format": qkv_format}
        if impl == "stock" and batch * nh * (size * size) ** 2 > STOCK_MAX_SCORES:
            records.append({**record, "skipped": "attention matrix too large"})
            continue
        fn = core_fn(impl)
        if mode == "inference":
            def call(fn=fn):
                with torch.inference_mode():
                    return fn(qkv, nh, kd, size, size)
        else:
            x = qkv.detach().requires_grad_(True)

            def call(fn=fn, x=x):
                out = fn(x, nh, kd, size, size)
                return torch.autograd.grad(out, x, grad)
        try:
            call()
            iters = _iters(call)
            gpu, kernels = kernel_times(call, iters)
            wall = wall_us(call, iters)
        except Exception as err:  # an unsupported backend/dtype: say so, keep going
            records.append({**record, "skipped": f"{type(err).__name__}: {str(err)[:120]}"})
            continue
        ours = sum(t for name, t in kernels.items() if name.startswith("psa_"))
        records.append({**record, "gpu_us": gpu, "wall_us": wall, "psa_kernels_us": ours,
                        "layout_kernels_us": layout_us(kernels) if impl in FUSED_IMPLS else None,
                        "kernels": {k[:80]: round(v, 2) for k, v in kernels.items()}})
    return records


def _wall_and_cpu_us(fn: Callable[[], object], iters: int) -> tuple[float, float]:
    """Wall time and this thread's CPU time per call (the CPU time leaves out the time the
    host's scheduler gave other processes)."""
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(iters):
        fn()
    cpu = time.thread_time() - cpu
    torch.cuda.synchronize()
    return (time.perf_counter() - wall) / iters * 1e6, cpu / iters * 1e6


def bench_block(c1: int, batch: int, size: int, dtype: torch.dtype, qkv_format: str = "nchw",
                rounds: int = 15) -> list[dict]:
    """ultralytics' C2PSA and its Attention module alone, eager inference: stock vs patched
    (wall, host CPU and GPU time per call). The implementations are timed in interleaved
    rounds of 100 calls; each keeps its best round (and the median is recorded): the host's
    background load drifts over seconds, and timing one implementation after the other would
    charge the drift to whichever ran later. The same drift is why each patched record also
    compares *within* rounds: the median over rounds of its wall time over stock's in that
    round, and in how many rounds it was the faster (a paired sign count, robust to a host
    whose rounds spread more than the difference). ``qkv_format`` channels_last: the block and
    its inputs in channels_last memory (a channels_last model)."""
    try:
        from ultralytics.nn.modules.block import C2PSA
    except ImportError:
        return [{"part": "c2psa", "skipped": "ultralytics is not installed"}]
    from psa_tvm.integrations.ultralytics import patch, unpatch

    torch.manual_seed(0)
    block = C2PSA(c1, c1, n=1).to("cuda", dtype).eval()
    attention = block.m[0].attn
    x = torch.randn(batch, c1, size, size, device="cuda", dtype=dtype)
    x_attention = torch.randn(batch, c1 // 2, size, size, device="cuda", dtype=dtype)
    if qkv_format == "channels_last":
        block = block.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        x_attention = x_attention.contiguous(memory_format=torch.channels_last)
    impls = ("stock", *FUSED_IMPLS)
    parts = {"c2psa": lambda: block(x), "c2psa.attention": lambda: attention(x_attention)}
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    failed: dict[str, str] = {}

    def use(impl: str) -> None:
        unpatch(block)
        if impl != "stock":
            patch(block, impl)

    for round_ in range(rounds):
        for impl in impls:
            if impl in failed:
                continue
            use(impl)
            for part, fn in parts.items():
                def call(fn=fn):
                    with torch.inference_mode():
                        return fn()
                try:
                    if round_ == 0:
                        call()
                    wall, cpu = _wall_and_cpu_us(call, 100)
                except Exception as err:  # an unsupported backend/dtype: say so, keep going
                    failed[impl] = f"{type(err).__name__}: {str(err)[:120]}"
                    break
                walls.setdefault((part, impl), []).append(wall)
                cpus.setdefault((part, impl), []).append(cpu)
    records = []
    for part, fn in parts.items():
        for impl in impls:
            record = {"part": part, "impl": impl, "dim": c1, "batch": batch, "size": size,
                      "dtype": str(dtype).removeprefix("torch."), "mode": "inference",
                      "qkv_format": qkv_format}
            if impl in failed:
                records.append({**record, "skipped": failed[impl]})
                continue
            use(impl)

            def call(fn=fn):
                with torch.inference_mode():
                    return fn()
            gpu, _ = kernel_times(call, 50)
            wall = sorted(walls[part, impl])
            paired = {}
            stock_walls = walls.get((part, "stock"), [])
            if impl != "stock" and len(walls[part, impl]) == len(stock_walls):
                ratios = sorted(w / s for w, s in zip(walls[part, impl], stock_walls,
                                                      strict=True))
                paired = {"round_ratio_median": ratios[len(ratios) // 2],
                          "rounds_faster": sum(r < 1 for r in ratios)}
            records.append({**record, "gpu_us": gpu, "wall_us": wall[0],
                            "wall_median_us": wall[len(wall) // 2],
                            "cpu_us": min(cpus[part, impl]), "rounds": rounds, **paired})
    unpatch(block)
    return records


def bench_layout(dim: int, batch: int, size: int, dtype: torch.dtype,
                 profiler: KernelProfiler | None = None) -> list[dict]:
    """Each layout kernel against a device copy of the same bytes (read + written), both timed
    two ways: the issue's way, profiler kernel time after an L2 flush (``KernelProfiler``,
    medians, as the tails benchmark), and back to back with a warm L2 (``kernel_times``), where
    up to 60 MB of the source stays in L2 between calls, which favours the flat copy at these
    sizes. ``profiler``: one shared by the cases of a run (it holds a 256 MB flush buffer)."""
    from psa_tvm.layouts import GATHER_OUTPUT, SCATTER_OUTPUT, STREAM_OPS
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp

    profiler = profiler or KernelProfiler(GpuTimer(reps=5), reps=15)
    nh = max(dim // 64, 1)
    kd = dim // nh // 2
    n = size * size
    stream = torch.cuda.current_stream().cuda_stream
    records = []
    for name, op in STREAM_OPS.items():
        runtime = PsaStreamRuntimeOp(name, kd, nh, str(dtype).removeprefix("torch."))
        for pass_ in op.passes:
            shapes = op.kernel_shapes(pass_, batch, n, nh, kd)
            tensors = {t: torch.randn(shape, device="cuda", dtype=dtype)
                       for t, shape in shapes.items()}
            output = GATHER_OUTPUT if pass_ == "forward" else SCATTER_OUTPUT
            read = sum(t.numel() for k, t in tensors.items() if k != output)
            moved_elements = read + tensors[output].numel()
            # the copy moves the same bytes: qkv_grad_flash reads 1.5x what it writes (dq and dk
            # arrive twice, one per flash call, and are summed)
            src = torch.randn(moved_elements // 2, device="cuda", dtype=dtype)
            dst = torch.empty_like(src)

            def kernel(tensors=tensors, runtime=runtime, pass_=pass_):
                runtime.launch(pass_, tensors, batch, n, stream)

            def copy(src=src, dst=dst):
                dst.copy_(src)

            kernel()
            t_kernel = profiler.median_us(kernel) or float("nan")
            t_copy = profiler.median_us(copy) or float("nan")
            warm_kernel, _ = kernel_times(kernel, 20)
            warm_copy, _ = kernel_times(copy, 20)
            moved = moved_elements * src.element_size()
            records.append({"part": "layout", "op": name, "pass": pass_, "dim": dim,
                            "batch": batch, "size": size,
                            "dtype": str(dtype).removeprefix("torch."), "mbytes": moved / 1e6,
                            "kernel_us": t_kernel, "copy_us": t_copy,
                            "fraction_of_copy": t_copy / t_kernel,
                            "warm_kernel_us": warm_kernel, "warm_copy_us": warm_copy,
                            "warm_fraction_of_copy": warm_copy / warm_kernel})
    return records


def layout_row(r: dict) -> str:
    """A layout record as a table row; records of runs before the flushed timing (kernel and
    copy back to back, warm L2) read as such."""
    shape = f"{r['dim']}, {r['batch']}, {r['size']}x{r['size']}"
    if "fraction_of_copy" not in r:  # older runs: warm L2 only
        return (f"| layout {r['op']}/{r['pass']} | {shape} | {r['dtype']} | {r['mbytes']:.1f} MB "
                f"| warm L2 only | {r['kernel_us']:.1f} | | "
                f"{r['kernel_gbps'] / r['copy_gbps']:.2f} of copy (warm) | | |")
    return (f"| layout {r['op']}/{r['pass']} | {shape} | {r['dtype']} | {r['mbytes']:.1f} MB "
            f"| copy {r['copy_us']:.1f} us (warm {r['warm_copy_us']:.1f}) | {r['kernel_us']:.1f} "
            f"| (warm {r['warm_kernel_us']:.1f}) | {r['fraction_of_copy']:.2f} of copy "
            f"(warm {r['warm_fraction_of_copy']:.2f}) | | |")


def markdown(records: list[dict]) -> str:
    rows = ["| part | shape (dim, B, HxW) | dtype | mode | impl | GPU us | wall us | "
            "x stock (GPU) | x stock (wall) | pack+merge % |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    def key(r: dict) -> tuple:
        return (r["part"], r["dim"], r["batch"], r["size"], r["dtype"], r["mode"],
                r.get("qkv_format", "nchw"))

    stock = {key(r): r for r in records if r.get("impl") == "stock" and "gpu_us" in r}
    for r in records:
        if r.get("part") == "layout":
            rows.append(layout_row(r))
            continue
        if "impl" not in r:
            continue
        shape = f"{r['dim']}, {r['batch']}, {r['size']}x{r['size']}"
        mode = r["mode"] + (", qkv channels_last" if r.get("qkv_format") == "channels_last"
                            else "")
        if "gpu_us" not in r:
            rows.append(f"| {r['part']} | {shape} | {r['dtype']} | {mode} | {r['impl']} | "
                        f"skipped: {r['skipped']} | | | | |")
            continue
        base = stock.get(key(r))
        speedup = f"{base['gpu_us'] / r['gpu_us']:.2f}" if base else ""
        wall_speedup = f"{base['wall_us'] / r['wall_us']:.2f}" if base else ""
        # older records hold only the psa-tvm kernels' time (then the only layout kernels)
        layout = r.get("layout_kernels_us", r.get("psa_kernels_us"))
        share = f"{100 * layout / r['gpu_us']:.1f}" if layout is not None and \
            r["impl"] in FUSED_IMPLS else ""
        wall = f"{r['wall_us']:.1f}"
        if "wall_median_us" in r:  # the blocks: best round (median round; host CPU time)
            wall += f" ({r['wall_median_us']:.0f}; cpu {r['cpu_us']:.0f})"
        if "rounds_faster" in r:  # paired within rounds: median ratio, rounds it was faster
            wall_speedup += (f" (per round {1 / r['round_ratio_median']:.2f}, faster in "
                             f"{r['rounds_faster']}/{r['rounds']})")
        rows.append(f"| {r['part']} | {shape} | {r['dtype']} | {mode} | {r['impl']} | "
                    f"{r['gpu_us']:.1f} | {wall} | {speedup} | {wall_speedup} | {share} |")
    return "\n".join(rows)


def plot(records: list[dict], path: Path) -> None:
    """Speed-up over stock (GPU time) of every core case, one panel per dtype and mode, and the
    batch-1 C2PSA wall times; matplotlib is optional (the caller catches its ImportError)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    core = [r for r in records if r.get("part") == "core" and "gpu_us" in r
            and r.get("qkv_format", "nchw") == "nchw"]
    blocks = [r for r in records if r.get("part") in ("c2psa", "c2psa.attention")
              and "wall_us" in r]
    groups = [(d, m) for d in ("float16", "bfloat16") for m in ("inference", "training")
              if any(r["dtype"] == d and r["mode"] == m for r in core)]
    if not groups and not blocks:
        return
    fig, axes = plt.subplots(len(groups) + bool(blocks), 1,
                             figsize=(14, 3.2 * (len(groups) + bool(blocks))), squeeze=False)
    impls = [i for i in IMPLS if i != "stock"]
    width = 0.8 / len(impls)
    for ax, (dtype, mode) in zip(axes[:, 0], groups, strict=False):
        subset = [r for r in core if r["dtype"] == dtype and r["mode"] == mode]
        shapes = list(dict.fromkeys((r["dim"], r["batch"], r["size"]) for r in subset))
        stock = {(r["dim"], r["batch"], r["size"]): r["gpu_us"]
                 for r in subset if r["impl"] == "stock"}
        for k, impl in enumerate(impls):
            values = [next((stock[s] / r["gpu_us"] for r in subset if s in stock
                            and (r["dim"], r["batch"], r["size"]) == s and r["impl"] == impl),
                           0) for s in shapes]
            ax.bar([i + k * width for i in range(len(shapes))], values, width, label=impl)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks([i + 0.4 for i in range(len(shapes))],
                      [f"{d}, B={b}, {n}x{n}" for d, b, n in shapes], rotation=30, ha="right",
                      fontsize=7)
        ax.set_ylabel("x stock (GPU time)")
        ax.set_title(f"attention core, {dtype} {mode}: speed-up over ultralytics' matmul path "
                     "(profiler kernel time)")
        ax.legend(ncol=len(impls), fontsize=8)
    if blocks:
        ax = axes[-1, 0]
        def label(r: dict) -> str:
            cl = ", CL" if r.get("qkv_format") == "channels_last" else ""
            return f"{r['part']} ({r['dim']}{cl})"

        names = list(dict.fromkeys(label(r) for r in blocks))
        block_impls = list(dict.fromkeys(r["impl"] for r in blocks))
        bar = 0.8 / len(block_impls)
        for k, impl in enumerate(block_impls):
            values = [next((r["wall_us"] for r in blocks if r["impl"] == impl
                            and label(r) == name), 0) for name in names]
            ax.bar([i + k * bar for i in range(len(names))], values, bar, label=impl)
        ax.set_xticks([i + 0.4 for i in range(len(names))], names, fontsize=8)
        ax.set_ylabel("wall us per call")
        ax.set_title("batch 1, 20x20, float16, eager inference: wall time per call (best of "
                     "15 interleaved rounds; host-bound)")
        ax.legend(ncol=len(block_impls), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def add_arguments(parser, standalone: bool = True) -> None:
    """This benchmark's arguments; ``standalone=False`` when ``psa-tvm bench`` already has
    ``--dtypes``, ``--out`` and ``--artifacts``."""
    if standalone:
        parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"],
                            choices=["float16", "bfloat16"])
        parser.add_argument("--out", default="bench-attention")
        parser.add_argument("--artifacts", default=None)
    parser.add_argument("--modes", nargs="+", default=["inference", "training"],
                        choices=["inference", "training"])
    # Not --shapes: `psa-tvm bench` has that option for the merge's grids.
    parser.add_argument("--attention-shapes", choices=["targets", "grid", "all", "layout"],
                        default="all",
                        help="the issue's target shapes, the YOLO grid, or both; `layout`: only "
                             "the layout kernels, at every benchmarked shape that moves >= 8 MB")
    parser.add_argument("--qkv-formats", nargs="+", default=list(QKV_FORMATS),
                        choices=QKV_FORMATS,
                        help="memory formats of the core's qkv input (channels_last: no pack)")
    parser.add_argument("--budget-s", type=float, default=600.0,
                        help="stop starting new cases after this many seconds")
    parser.add_argument("--replot-attention", metavar="BENCH_ATTENTION_JSON", default=None,
                        help="only redraw the table and plot of an earlier run (no GPU needed)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="psa-tvm bench --attention", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _write_plot(records: list[dict], out: Path) -> None:
    try:
        plot(records, out / "bench_attention.png")
    except ImportError as err:  # matplotlib is optional: the table and JSON are written
        print(f"no plot: {err}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "replot_attention", None):
        records = json.loads(Path(args.replot_attention).read_text())["records"]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_attention.md").write_text(markdown(records) + "\n")
        _write_plot(records, out)
        return 0
    if not torch.cuda.is_available():
        print("psa-tvm bench --attention needs a CUDA GPU", file=sys.stderr)
        return 2
    if getattr(args, "artifacts", None):
        env.set_artifacts_dir(args.artifacts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    records: list[dict] = []

    def save() -> None:
        (out / "bench_attention.json").write_text(json.dumps({"records": records}, indent=1))
        (out / "bench_attention.md").write_text(markdown(records) + "\n")

    # Most telling first, so a time budget cuts the tail: the blocks, the shapes in
    # float16, then the grid, then bfloat16.
    dtypes = [d for d in args.dtypes if d in ("float16", "bfloat16")]  # what flash/cuDNN run
    order = [("targets", "float16", "inference"), ("targets", "float16", "training"),
             ("grid", "float16", "inference"), ("targets", "bfloat16", "inference"),
             ("targets", "bfloat16", "training"), ("grid", "float16", "training"),
             ("grid", "bfloat16", "inference"), ("grid", "bfloat16", "training")]
    groups = {"targets": TARGET_SHAPES, "grid": GRID_SHAPES}
    formats = getattr(args, "qkv_formats", ["nchw"])
    cases: list[tuple] = [("layout", 256, 64, 80, torch.float16),
                          ("layout", 384, 16, 40, torch.float16),
                          *(("block", dim, 1, 20, torch.float16, fmt)
                            for fmt in formats for dim in (256, 512))]
    if args.attention_shapes == "layout":
        cases = [("layout", dim, b, size, getattr(torch, dtype))
                 for dtype in dtypes for dim, b, size in TARGET_SHAPES + GRID_SHAPES
                 if layout_bytes(dim, b, size, dtype) >= LAYOUT_MIN_BYTES]
    cases += [("core", dim, b, size, getattr(torch, dtype), mode, fmt)
              for group, dtype, mode in order
              if args.attention_shapes in (group, "all") and dtype in dtypes and mode in args.modes
              for dim, b, size in groups[group] for fmt in formats]
    profiler: KernelProfiler | None = None  # made at the first layout case, then shared
    for case in cases:
        if time.perf_counter() - start > args.budget_s:
            records.append({"part": "note", "skipped": f"budget reached before {case}"})
            break
        if case[0] == "layout":
            profiler = profiler or KernelProfiler(GpuTimer(reps=5), reps=15)
            records.extend(bench_layout(*case[1:], profiler=profiler))
        elif case[0] == "block":
            records.extend(bench_block(*case[1:]))
        else:
            records.extend(bench_core(*case[1:]))
        save()
    _write_plot(records, out)
    print(markdown(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
