"""Benchmark forward and backward against the copy floor and the PyTorch peers.

Runs on the GPU host from prebuilt artifacts (no TVM there). For every shape and dtype it times, in
one process and on the same non-zero inputs: a device-to-device copy of the same bytes, from the
pass's inputs into its outputs (the floor; at L2-sized calls a copy's time depends on where its
buffers lie, docs/perf.md v23), the same bytes moved by an elementwise kernel (``copy_kernel``: the
driver's memcpy is 19-29% slower off multiples of 4 KiB, docs/perf.md v30), PyTorch eager,
``torch.compile`` (static per shape, and one dynamic-shape build), and each of our schedules. Every
row has two times: CUDA events around the call (L2 flushed, GPU spun so the launch is queued first)
and the kernel time CUPTI reports through ``torch.profiler``; the ratio to the copy is taken from
the profiler times. Shapes: the square YOLO maps (``yolo``) and rectangular and odd grids
(``tails``: 20x15, 20x12, 40x23, 37x29, 1x33, 64x3). ``--cpu`` adds a CPU section (torch eager,
torch ``copy_``, psa-tvm's CPU library), which needs no GPU. Writes ``bench.json``, ``bench.md`` and
``bench.png`` (and ``bench_tails.png``) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import DTYPE_ITEMSIZE, OpConfig
from psa_tvm.presets import YOLO11
from psa_tvm.runtime import env
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import (
    GpuTimer,
    KernelProfiler,
    flat_copy,
    flat_copy_kernel,
    host_us_per_call,
    merge_halves,
)

DTYPES = {name: getattr(torch, name) for name in DTYPE_ITEMSIZE}
PEERS = ("copy", "copy_kernel", "eager", "compile_static", "compile_dynamic")


@dataclass(frozen=True)
class Shape:
    label: str
    batch: int
    num_heads: int
    key_dim: int
    height: int
    width: int

    @property
    def n(self) -> int:
        return self.height * self.width

    def merged_bytes(self, dtype: str) -> int:
        return OpConfig(self.key_dim, self.num_heads, dtype).merged_bytes(
            self.batch, self.height, self.width)


def yolo_shapes(quick: bool = False) -> list[Shape]:
    """YOLO11 n/s/m/l/x PSA at 640 and 1280 px (stride 32), batch 1/16/64, plus a stress shape."""
    by_key: dict[tuple, list[str]] = {}
    for model in YOLO11:
        for px in (640, 1280):
            for batch in (1, 16, 64):
                key = (batch, model.num_heads, model.key_dim, px // 32)
                by_key.setdefault(key, []).append(model.model)
    shapes = [Shape(f"{''.join(models)}@{side * 32}/b{batch}", batch, nh, kd, side, side)
              for (batch, nh, kd, side), models in by_key.items()]
    shapes.append(Shape("stress/b64@160x160", 64, 4, 32, 160, 160))
    if quick:
        shapes = [s for s in shapes if (s.batch, s.height) in ((1, 20), (64, 40))] + shapes[-1:]
    return shapes


#: Rectangular and odd grids (N = H*W not a multiple of the 16-byte vector): 640x480 input
#: (20x15), a 1280x720 letterbox (40x23), odd maps, and degenerate rows/columns.
TAIL_GRIDS = ((20, 15), (20, 12), (40, 23), (37, 29), (1, 33), (64, 3))


def tail_shapes() -> list[Shape]:
    """The tail grids at batch 1, 16 and 64 (YOLO11 s/m/l heads: nh=4, kd=32), plus the issue's
    YOLO11x shape (nh=6, 20x12, batch 64)."""
    shapes = [Shape(f"{h}x{w}/b{batch}", batch, 4, 32, h, w)
              for h, w in TAIL_GRIDS for batch in (1, 16, 64)]
    shapes.append(Shape("20x12/b64/nh6", 64, 6, 32, 20, 12))
    return shapes


def bench_shapes(which: str, quick: bool = False) -> list[Shape]:
    """``--quick`` thins out the square YOLO maps only; the tails are the point of ``tails``."""
    return {"yolo": yolo_shapes(quick), "tails": tail_shapes(),
            "all": yolo_shapes(quick) + tail_shapes()}[which]


def run(args: argparse.Namespace) -> list[dict]:
    timer = GpuTimer(reps=args.reps)
    profiler = KernelProfiler(timer, reps=args.profile_reps) if args.profile_reps else None
    dynamic = None
    if "compile_dynamic" in args.peers:
        dynamic = (torch.compile(reference.merge, dynamic=True),
                   torch.compile(reference.merge_backward, dynamic=True))
    records = []
    partial = Path(args.out) / "bench.partial.jsonl"  # kept if a time limit cuts the run short
    partial.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("w") as sink:
        for dtype_name in args.dtypes:
            for shape in bench_shapes(args.shapes, args.quick):
                rows = time_shape(timer, shape, dtype_name, args.schedules, args.artifacts,
                                  dynamic, peers=args.peers, profiler=profiler,
                                  copy_buffers=args.copy_buffers,
                                  placements=args.placements)
                sink.write("".join(json.dumps(r) + "\n" for r in rows))
                sink.flush()
                records += rows
    return records


def time_shape(timer: GpuTimer, shape: Shape, dtype_name: str, schedules: list[str],
               artifacts: str, dynamic: tuple | None, peers: tuple[str, ...] = PEERS,
               profiler: KernelProfiler | None = None, copy_buffers: str = "kernel",
               placements: int = 1) -> list[dict]:
    """Every implementation of both passes on one shape and dtype, same inputs.

    ``copy_buffers="kernel"``: each pass's copy reads that pass's inputs and writes its outputs
    (``lo`` and ``hi`` are the two halves of one buffer, and so are ``d_lo`` and ``d_hi``), so
    the floor moves the kernel's own bytes at the kernel's own addresses. ``"own"`` (rounds up
    to v22): one copy between two buffers of its own serves both passes.

    ``placements``: the whole set of tensors is allocated this many times (all alive at once,
    so each set lies at other addresses) and every implementation is timed on each; a row
    holds the medians, and its profiler ratio is the median of the per-set ratios. At L2-sized
    calls one copy's time moves by 5% with where its buffers lie (docs/perf.md v23).
    """
    if copy_buffers not in ("kernel", "own"):
        raise ValueError(f"copy_buffers: expected 'kernel' or 'own', got {copy_buffers!r}")
    if placements < 1:
        raise ValueError(f"placements: expected at least 1, got {placements}")
    ops = {s: PsaMergeAttnRuntimeOp(shape.key_dim, shape.num_heads, dtype_name, schedule=s,
                                    artifacts=artifacts) for s in schedules}
    compiled = None
    if "compile_static" in peers:
        compiled = (torch.compile(reference.merge, dynamic=False),
                    torch.compile(reference.merge_backward, dynamic=False))
    gen = torch.Generator(device="cuda").manual_seed(0)
    sets = [_implementations(shape, DTYPES[dtype_name], gen, ops, copy_buffers, compiled,
                             dynamic) for _ in range(placements)]
    variants = sets[0][1]
    records = []
    moved = 2 * shape.merged_bytes(dtype_name)
    for pass_ in ("forward", "backward"):
        names = [name for name in sets[0][0][pass_] if name in peers or name in ops]
        # per set: name -> (event us, profiler us or None)
        timed = [{name: (timer.median_us(impls[pass_][name]),
                         profiler.median_us(impls[pass_][name]) if profiler else None)
                  for name in names} for impls, _ in sets]
        for name in names:
            us = statistics.median(t[name][0] for t in timed)
            profs = [t[name][1] for t in timed]
            ratios = [p / t["copy"][1] for p, t in zip(profs, timed, strict=True)
                      if p and t["copy"][1]]
            prof = statistics.median(profs) if all(profs) else None
            prof_copy = statistics.median(t["copy"][1] for t in timed) if prof else None
            kernel = variants.get((pass_, name))
            records.append({
                **asdict(shape), "n": shape.n, "dtype": dtype_name, "pass": pass_,
                "impl": name, "us": round(us, 3), "bytes_moved": moved,
                "gbps": round(moved / us / 1e3, 1),
                "fraction_of_copy": round(statistics.median(
                    t["copy"][0] / t[name][0] for t in timed), 4),
                "prof_us": None if prof is None else round(prof, 3),
                "prof_copy_us": None if prof_copy is None else round(prof_copy, 3),
                # kernel time / copy time, both from the profiler (1.0 = at the copy floor),
                # the median over the placements; each placement's beside it
                "prof_ratio": round(statistics.median(ratios), 4) if ratios else None,
                "prof_ratios": [round(r, 4) for r in ratios],
                "variant": None if kernel is None else {"vec_kd": kernel.vec_kd,
                                                        "vec": kernel.vec,
                                                        "shifted": kernel.shifted,
                                                        "index_dtype": kernel.index_dtype},
                # which kernel of that variant (a split shifted backward has two); outside
                # "variant" so that runs of two tables still compare row by row
                "kernel": None if kernel is None else kernel.entry,
                "copy_buffers": copy_buffers, "placements": placements,
            })
        line = "  ".join(f"{r['impl']}={r['us']:7.1f}/{r['prof_us'] or float('nan'):7.1f}"
                         for r in records[-len(names):])
        print(f"{dtype_name:8s} {pass_:8s} {shape.label:22s} {line}", flush=True)
    return records


def _implementations(shape: Shape, dtype: torch.dtype, gen: torch.Generator,
                     ops: dict[str, PsaMergeAttnRuntimeOp], copy_buffers: str,
                     compiled: tuple | None, dynamic: tuple | None) -> tuple[dict, dict]:
    """One placement: fresh tensors, and per pass every implementation as a callable on them;
    with the kernel that each of our schedules launches there."""
    inputs = merge_halves(shape.batch * shape.num_heads, shape.n, shape.key_dim, dtype, gen)
    lo, hi = inputs[0], inputs[1]
    merged = torch.empty(shape.batch, 2 * shape.num_heads * shape.key_dim, shape.height,
                         shape.width, device="cuda", dtype=dtype)
    grad = torch.randn(merged.shape, device="cuda", dtype=dtype, generator=gen) + 3
    grads_out = torch.empty_like(inputs)
    d_lo, d_hi = grads_out[0], grads_out[1]
    if copy_buffers == "kernel":
        buffers = {"forward": (inputs, merged), "backward": (grad, grads_out)}
    else:
        own = (inputs.clone(), torch.empty_like(merged))
        buffers = {"forward": own, "backward": own}
    args_f = (lo, hi, shape.num_heads, shape.height, shape.width)
    args_b = (grad, shape.num_heads, shape.key_dim)
    stream = torch.cuda.current_stream().cuda_stream
    spatial = (shape.height, shape.width)
    impls = {
        "forward": {
            "copy": flat_copy(*buffers["forward"]),
            "copy_kernel": flat_copy_kernel(*buffers["forward"]),
            "eager": lambda: reference.merge(*args_f),
            "compile_static": lambda: compiled[0](*args_f),  # type: ignore[index]
            "compile_dynamic": lambda: dynamic[0](*args_f),  # type: ignore[index]
            **{s: (lambda op=op: op.launch_forward(lo, hi, merged, stream, spatial))
               for s, op in ops.items()},
        },
        "backward": {
            "copy": flat_copy(*buffers["backward"]),
            "copy_kernel": flat_copy_kernel(*buffers["backward"]),
            "eager": lambda: reference.merge_backward(*args_b),
            "compile_static": lambda: compiled[1](*args_b),  # type: ignore[index]
            "compile_dynamic": lambda: dynamic[1](*args_b),  # type: ignore[index]
            **{s: (lambda op=op: op.launch_backward(grad, d_lo, d_hi, stream))
               for s, op in ops.items()},
        },
    }
    variants = {("forward", s): op.plan_forward([lo, hi], merged, spatial).kernel
                for s, op in ops.items()}
    variants.update({("backward", s): op.plan_backward(grad, [d_lo, d_hi]).kernel
                     for s, op in ops.items()})
    return impls, variants


def host_overhead(artifacts: str) -> dict:
    """Per-call host time of our torch op against a one-op torch call, small shape."""
    import psa_tvm.torch as psa_torch

    lo = torch.randn(4, 400, 32, device="cuda", dtype=torch.float16)
    hi = torch.randn_like(lo)
    return {
        "psa_tvm.torch.merge_attn_us": round(host_us_per_call(
            lambda: psa_torch.merge_attn(lo, hi, 4, 20, 20)), 2),
        "torch.add_us": round(host_us_per_call(lambda: torch.add(lo, hi)), 2),
        "torch.permute_contiguous_us": round(host_us_per_call(
            lambda: lo.permute(0, 2, 1).contiguous()), 2),
    }


def _impls(records: list[dict], schedules: list[str]) -> list[str]:
    present = set(r["impl"] for r in records)
    return [i for i in ("copy_kernel", *schedules, "eager", "compile_static", "compile_dynamic")
            if i in present]


def _ratio(r: dict) -> float:
    """Time / copy time: the profiler's kernel times where there are, else the events'."""
    return r["prof_ratio"] if r.get("prof_ratio") else 1 / r["fraction_of_copy"]


def _us(r: dict) -> str:
    prof = r.get("prof_us")
    return f"{r['us']:.1f} / {prof:.1f}" if prof else f"{r['us']:.1f} / -"


def markdown(records: list[dict], schedules: list[str]) -> str:
    """Every row: events / profiler microseconds, and the profiler ratio to the copy."""
    impls = _impls(records, schedules)
    head = ("| dtype | pass | shape | N | MB moved | copy us (events / profiler) | "
            + " | ".join(f"{i} us (events / profiler) [x copy]" for i in impls)
            + " | variant (vec_kd, vec; s = shifted) |")
    lines = [head, "|" + "---|" * (7 + len(impls))]
    rows: dict[tuple, dict] = {}
    for r in records:
        rows.setdefault((r["dtype"], r["pass"], r["label"]), {})[r["impl"]] = r
    for (dtype, pass_, label), by_impl in rows.items():
        cells = [f"{_us(by_impl[i])} [{_ratio(by_impl[i]):.2f}]" for i in impls]
        copy = by_impl["copy"]
        variant = next((by_impl[s]["variant"] for s in schedules
                        if s in by_impl and by_impl[s].get("variant")), None)
        widths = "-"
        if variant:  # the N side: its width, or "s" for a shifted kernel (any N, 16 bytes)
            widths = f"({variant['vec_kd']}, {'s' if variant.get('shifted') else variant['vec']})"
        lines.append(f"| {dtype} | {pass_} | {label} | {copy['n']} | "
                     f"{copy['bytes_moved'] / 1e6:.1f} | {_us(copy)} | " + " | ".join(cells)
                     + f" | {widths} |")
    return "\n".join(lines)


def _to_copy_kernel(r: dict, records: list[dict]) -> float | None:
    """``r``'s profiler time over the elementwise copy's of the same row (``copy_kernel``), or
    None where that peer was not timed."""
    peer = next((c for c in records if c["impl"] == "copy_kernel" and (
        c["dtype"], c["pass"], c["label"]) == (r["dtype"], r["pass"], r["label"])), None)
    if peer is None or not peer.get("prof_us") or not r.get("prof_us"):
        return None
    return r["prof_us"] / peer["prof_us"]


def summary(records: list[dict], schedule: str = "tiled") -> str:
    """Against the targets: <= 1.05x copy at >= 8 MB, within 1 us of the copy below 1 MB; and,
    where the ``copy_kernel`` peer ran, the >= 8 MB rows against that steadier floor."""
    by_kernel = any(r["impl"] == "copy_kernel" for r in records)
    lines = ["| dtype | pass | >= 8 MB: max ratio (shape) | 1-8 MB: max ratio | "
             "< 1 MB: max excess over copy, us (shape) |"
             + (" >= 8 MB: max ratio to the copy kernel (shape) |" if by_kernel else ""),
             "|---|---|---|---|---|" + ("---|" if by_kernel else "")]
    groups = dict.fromkeys((r["dtype"], r["pass"]) for r in records if r["impl"] == schedule)
    for dtype, pass_ in groups:
        rows = [r for r in records if (r["dtype"], r["pass"], r["impl"]) == (dtype, pass_,
                                                                              schedule)]
        big = [r for r in rows if r["bytes_moved"] >= 8e6]
        mid = [r for r in rows if 1e6 <= r["bytes_moved"] < 8e6]
        small = [r for r in rows if r["bytes_moved"] < 1e6]
        worst = max(big, key=_ratio, default=None)
        mid_worst = max(mid, key=_ratio, default=None)

        def excess(r: dict) -> float:
            if r.get("prof_us") and r.get("prof_copy_us"):
                return r["prof_us"] - r["prof_copy_us"]
            return r["us"] * (1 - r["fraction_of_copy"])

        small_worst = max(small, key=excess, default=None)
        line = (f"| {dtype} | {pass_} | "
                + (f"{_ratio(worst):.3f} ({worst['label']})" if worst else "-") + " | "
                + (f"{_ratio(mid_worst):.3f} ({mid_worst['label']})" if mid_worst else "-")
                + " | " + (f"{excess(small_worst):+.2f} ({small_worst['label']})"
                           if small_worst else "-") + " |")
        if by_kernel:
            to_kernel = [(ratio, r["label"]) for r in big
                         if (ratio := _to_copy_kernel(r, records)) is not None]
            worst_kernel = max(to_kernel, default=None)
            line += (f" {worst_kernel[0]:.3f} ({worst_kernel[1]}) |" if worst_kernel
                     else " - |")
        lines.append(line)
    return "\n".join(lines)


def plot(records: list[dict], schedules: list[str], path: Path) -> None:
    """Time / copy time (profiler where available) per shape, one panel per dtype and pass."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    impls = _impls(records, schedules)
    groups = [(d, p) for d in DTYPES for p in ("forward", "backward")
              if any(r["dtype"] == d and r["pass"] == p for r in records)]
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 1, figsize=(14, 3.2 * len(groups)), squeeze=False)
    for ax, (dtype, pass_) in zip(axes[:, 0], groups, strict=True):
        subset = [r for r in records if r["dtype"] == dtype and r["pass"] == pass_]
        labels = list(dict.fromkeys(r["label"] for r in subset))
        width = 0.8 / len(impls)
        for k, impl in enumerate(impls):
            values = [next((_ratio(r) for r in subset
                            if r["label"] == lab and r["impl"] == impl), 0) for lab in labels]
            ax.bar([i + k * width for i in range(len(labels))], values, width, label=impl)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(1.05, color="gray", lw=0.8, ls="--")
        ax.set_xticks([i + 0.4 for i in range(len(labels))], labels, rotation=45, ha="right",
                      fontsize=7)
        ax.set_ylabel("time / copy time")
        ax.set_ylim(0, 3)
        ax.set_title(f"{dtype} {pass_}: kernel time / copy time (profiler; 1.0 = copy floor)")
    axes[0, 0].legend(ncol=len(impls), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------- CPU section
def cpu_shapes(quick: bool = False) -> list[Shape]:
    """CPU shapes: the square YOLO maps and the tail grids at batch 1 and 16."""
    shapes = [Shape(f"{h}x{w}/b{b}", b, 4, 32, h, w)
              for h, w in ((20, 20), (40, 40), *TAIL_GRIDS) for b in (1, 16)]
    return [s for s in shapes if s.batch == 16] if quick else shapes


#: Interleaved rounds of the CPU section (each: the copy, then every impl).
CPU_ROUNDS = 5


def _wall_us(fn, reps: int) -> float:
    """Median wall time of ``fn`` (synchronous on the CPU) in microseconds."""
    import time

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def run_cpu(args: argparse.Namespace) -> list[dict]:
    """The CPU section: every dtype and CPU shape."""
    return [r for dtype_name in args.dtypes for shape in cpu_shapes(args.quick)
            for r in time_cpu_shape(shape, dtype_name, args.cpu_reps)]


def time_cpu_shape(shape: Shape, dtype_name: str, reps: int) -> list[dict]:
    """torch eager, torch ``copy_`` of the same bytes and psa-tvm's CPU library, same inputs;
    psa-tvm's results are checked bit-exact against eager before timing."""
    import psa_tvm

    dtype = DTYPES[dtype_name]
    nh, kd, h, w = shape.num_heads, shape.key_dim, shape.height, shape.width
    gen = torch.Generator().manual_seed(0)
    lo = (torch.randn(shape.batch * nh, shape.n, kd, generator=gen) + 3).to(dtype)
    hi = (torch.randn(shape.batch * nh, shape.n, kd, generator=gen) - 3).to(dtype)
    grad = reference.merge(lo, hi, nh, h, w)
    src, dst = grad.reshape(-1).clone(), torch.empty(grad.numel(), dtype=dtype)
    merged = psa_tvm.merge(lo, hi, nh, h, w)
    d_lo, d_hi = psa_tvm.merge_backward(grad, nh, kd)
    if not (torch.equal(merged, grad) and torch.equal(d_lo, lo) and torch.equal(d_hi, hi)):
        raise AssertionError(f"CPU results differ from eager: {shape} {dtype_name}")
    # psa-tvm writes into preallocated outputs like copy_ does (a fresh CPU allocation of this
    # size costs its page faults on first touch, in eager's times too).
    out, out_lo, out_hi = torch.empty_like(grad), torch.empty_like(lo), torch.empty_like(hi)
    impls = {
        "forward": {"copy": lambda: dst.copy_(src),
                    "psa_tvm": lambda: psa_tvm.merge(lo, hi, nh, h, w, out=out),
                    "eager": lambda: reference.merge(lo, hi, nh, h, w)},
        "backward": {"copy": lambda: dst.copy_(src),
                     "psa_tvm": lambda: psa_tvm.merge_backward(grad, nh, kd, d_lo=out_lo,
                                                               d_hi=out_hi),
                     "eager": lambda: reference.merge_backward(grad, nh, kd)},
    }
    moved = 2 * shape.merged_bytes(dtype_name)
    kernels = _cpu_kernel_kinds(shape, dtype_name, lo, hi, out, grad, out_lo, out_hi)
    records = []
    for pass_, fns in impls.items():
        # Interleaved rounds: the machine may be shared, and its memory bandwidth moves within
        # seconds. Each round times the copy and then every impl, psa-tvm right after the copy
        # (eager's allocating calls in between moved its ratio by up to 2x on a 16-core Xeon),
        # and a ratio is taken within the round; the row's ratio is the median of those (a best
        # time of each side may come from different spells: docs/perf.md v31). Times are the
        # best round's.
        times: dict[str, float] = {}
        ratios: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(CPU_ROUNDS):
            copy_us = _wall_us(fns["copy"], reps)
            for name, fn in fns.items():
                us = copy_us if name == "copy" else _wall_us(fn, reps)
                times[name] = min(us, times.get(name, us))
                ratios[name].append(us / copy_us)
        for name, us in times.items():
            records.append({**asdict(shape), "n": shape.n, "dtype": dtype_name, "pass": pass_,
                            "impl": name, "us": round(us, 2), "bytes_moved": moved,
                            "ratio_to_copy": round(statistics.median(ratios[name]), 3),
                            **({"kernel": kernels[pass_]} if name == "psa_tvm" else {})})
        print(f"cpu {dtype_name:8s} {pass_:8s} {shape.label:12s} "
              + "  ".join(f"{k}={v:9.1f}" for k, v in times.items()), flush=True)
    return records


def _cpu_kernel_kinds(shape: Shape, dtype_name: str, lo, hi, out, grad, d_lo,
                      d_hi) -> dict[str, str]:
    """Which CPU kernel each pass of these calls runs (``generic``, ``prefetch``, ``vec``,
    ``pairs``: psa_tvm.runtime.cpu's choice, which the native library makes alike)."""
    from psa_tvm.runtime.cpu import cpu_kernels

    kernels = cpu_kernels(OpConfig(shape.key_dim, shape.num_heads, dtype_name))
    view = (shape.batch, shape.num_heads, 2, shape.key_dim, shape.n)
    return {"forward": kernels.plan_forward(lo, hi, out.view(view), shape.n)[0],
            "backward": kernels.plan_backward(grad.view(view), d_lo, d_hi, shape.n)[0]}


def cpu_call_path(dtypes: list[str]) -> str:
    """What ``psa_tvm.merge`` ran the CPU rows through: ``native`` (the default artifact
    directory's native library holds these configurations' CPU kernels: checks and launch in
    C++) or ``python`` (the Python checks and the per-configuration CPU libraries through
    tvm_ffi, 20-45 us more a call on the 2-core guest: docs/perf.md v39)."""
    import json

    from psa_tvm.runtime import native as native_rt

    native = native_rt.load(env.default_artifacts_dir())
    if not native:
        return "python"
    info = json.loads(native.module["library_info"]())
    with_cpu = {OpConfig(c["key_dim"], c["num_heads"], c["dtype"])
                for c in info["configs"] if c["cpu"]}
    return "native" if set(_cpu_configs(dtypes)) <= with_cpu else "native/python"


def _cpu_configs(dtypes: list[str]) -> list[OpConfig]:
    """The configurations the CPU section runs (those of :func:`cpu_shapes`), per dtype."""
    pairs = dict.fromkeys((s.key_dim, s.num_heads) for s in cpu_shapes())
    return [OpConfig(kd, nh, d) for kd, nh in pairs for d in dtypes]


def cpu_launcher(dtypes: list[str]) -> str:
    """What ran the CPU kernels' parallel regions (runtime/cpu_pool.py): the native library's
    launcher where it ran them, else the CPU libraries' (``own``, ``torch_openmp``,
    ``external`` = the PyTorch extension's at::parallel_for)."""
    from psa_tvm.runtime import cpu_pool
    from psa_tvm.runtime import native as native_rt
    from psa_tvm.runtime.cpu import cpu_kernels

    native = native_rt.load(env.default_artifacts_dir())
    if native:
        return cpu_pool.launcher_kind(native.path)
    kinds = {cpu_pool.launcher_kind(cpu_kernels(config).library.path)
             for config in _cpu_configs(dtypes)}  # loaded by now
    return "/".join(sorted(kinds))


def cpu_markdown(records: list[dict]) -> str:
    lines = ["| dtype | pass | shape | MB moved | copy_ us | eager us [x copy] | "
             "psa-tvm us [x copy] | psa-tvm kernel |", "|---|---|---|---|---|---|---|---|"]
    rows: dict[tuple, dict] = {}
    for r in records:
        rows.setdefault((r["dtype"], r["pass"], r["label"]), {})[r["impl"]] = r
    for (dtype, pass_, label), by in rows.items():
        lines.append(f"| {dtype} | {pass_} | {label} | {by['copy']['bytes_moved'] / 1e6:.1f} | "
                     f"{by['copy']['us']:.0f} | {by['eager']['us']:.0f} "
                     f"[{by['eager']['ratio_to_copy']:.2f}] | {by['psa_tvm']['us']:.0f} "
                     f"[{by['psa_tvm']['ratio_to_copy']:.2f}] | "
                     f"{by['psa_tvm'].get('kernel', '?')} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``psa-tvm bench`` (and of ``scripts/bench.py``)."""
    parser.add_argument("--artifacts", default=None,
                        help="artifact directory (default: $PSA_TVM_ARTIFACTS)")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--schedules", nargs="+", default=["tiled", "rowwise"])
    parser.add_argument("--shapes", choices=("yolo", "tails", "all"), default="all",
                        help="square YOLO maps, rectangular/odd grids, or both (default)")
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS),
                        help="PyTorch peers to time (copy is always timed)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--profile-reps", type=int, default=20,
                        help="runs per row read from torch.profiler (0: events only)")
    parser.add_argument("--copy-buffers", choices=("kernel", "own"), default="kernel",
                        help="the floor: a copy from each pass's inputs into its outputs "
                             "(kernel, default), or between buffers of its own (own: the "
                             "method of rounds up to v22; docs/perf.md v23)")
    parser.add_argument("--placements", type=int, default=3,
                        help="time every row on this many sets of tensors at other addresses; "
                             "a row's ratio is the median of theirs (default 3; 1: one set, "
                             "as rounds up to v22)")
    parser.add_argument("--quick", action="store_true", help="a subset of the shapes")
    parser.add_argument("--cpu", action="store_true",
                        help="also run the CPU section (torch eager, copy_, psa-tvm)")
    parser.add_argument("--cpu-only", action="store_true", help="only the CPU section")
    parser.add_argument("--cpu-reps", type=int, default=20)
    parser.add_argument("--cpu-threads", type=int, default=None,
                        help="threads for torch and psa-tvm's CPU pool (default: all cores)")
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--host", action="store_true",
                        help="only the host time per call of each launch path vs torch copy_")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="with --host: which device's tensors")
    parser.add_argument("--replot", metavar="BENCH_JSON",
                        help="only redraw the table and plot of an earlier run (no GPU needed)")
    parser.add_argument("--attention", action="store_true",
                        help="benchmark PSA attention end to end instead (tools/bench_attention)")
    from psa_tvm.tools import bench_attention

    bench_attention.add_arguments(parser.add_argument_group("--attention"), standalone=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="psa-tvm bench", description=__doc__)
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


def _write(out: Path, meta: dict, records: list[dict], cpu_records: list[dict],
           schedules: list[str]) -> str:
    (out / "bench.json").write_text(json.dumps(
        {"meta": meta, "records": records, "cpu_records": cpu_records}, indent=1))
    parts = [f"{meta.get('gpu', 'no GPU')}, {meta['date']}, torch {meta['torch']}"]
    if records:
        parts += ["GPU, against the targets (tiled, profiler times):", summary(records),
                  "GPU, every row: events / profiler us, [profiler time / profiler copy time]:",
                  markdown(records, schedules)]
        if meta.get("host_overhead"):
            parts.append(f"host overhead: {meta['host_overhead']}")
        try:
            plot([r for r in records if r["label"] in {s.label for s in yolo_shapes()}],
                 schedules, out / "bench.png")
            plot([r for r in records if r["label"] in {s.label for s in tail_shapes()}],
                 schedules, out / "bench_tails.png")
        except ImportError as err:  # matplotlib is optional: tables and JSON still written
            print(f"no plot: {err}", file=sys.stderr)
    if cpu_records:
        parts += [f"CPU ({meta.get('cpu', '?')}, {meta.get('cpu_threads')} threads, calls "
                  f"through: {meta.get('cpu_calls', '?')}, parallel "
                  f"regions on: {meta.get('cpu_launcher', '?')}): times are the best of "
                  f"{CPU_ROUNDS} interleaved rounds of the median wall time, [x copy] the "
                  "median over the rounds of time / that round's copy_ time; psa-tvm writes "
                  "into preallocated outputs, eager allocates:",
                  cpu_markdown(cpu_records)]
    text = "\n\n".join(parts) + "\n"
    (out / "bench.md").write_text(text)
    return text


def run_command(args: argparse.Namespace) -> int:
    if args.placements < 1:  # before anything is set up
        print(f"--placements: expected a count of 1 or more, got {args.placements}",
              file=sys.stderr)
        return 2
    if args.attention:
        from psa_tvm.tools import bench_attention

        if args.artifacts:
            env.set_artifacts_dir(args.artifacts)
        return bench_attention.run(args)
    if args.artifacts:
        env.set_artifacts_dir(args.artifacts)  # the torch op in host_overhead runs from them too
    args.artifacts = str(env.artifacts_override() or "") or None
    if args.host:
        from psa_tvm.tools.host_bench import main_host

        return main_host(args.device)
    out = Path(args.out)
    if args.replot:
        data = json.loads(Path(args.replot).read_text())
        schedules = [s for s in dict.fromkeys(r["impl"] for r in data["records"])
                     if s not in PEERS]
        out.mkdir(parents=True, exist_ok=True)
        _write(out, data["meta"], data["records"], data.get("cpu_records", []), schedules)
        return 0
    meta = {"date": date.today().isoformat(), "torch": torch.__version__,
            "python": platform.python_version(), "cpu": platform.processor() or
            platform.machine(), "cpu_threads": torch.get_num_threads()}
    records: list[dict] = []
    if not args.cpu_only:
        if not torch.cuda.is_available() or not args.artifacts:
            print("psa-tvm bench needs a CUDA GPU and --artifacts (or PSA_TVM_ARTIFACTS); "
                  "--cpu-only runs the CPU section alone", file=sys.stderr)
            return 2
        torch._dynamo.config.cache_size_limit = 1024
        if "copy" not in args.peers:
            args.peers = ["copy", *args.peers]
        records = run(args)
        meta.update(gpu=torch.cuda.get_device_name(), copy_buffers=args.copy_buffers,
                    placements=args.placements,
                    host_overhead=host_overhead(args.artifacts))
    cpu_records = []
    if args.cpu or args.cpu_only:
        if args.cpu_threads:  # before the first CPU library loads: its pool reads it once
            env.set_cpu_threads(args.cpu_threads)
            torch.set_num_threads(args.cpu_threads)
        meta["cpu_threads"] = torch.get_num_threads()
        cpu_records = run_cpu(args)
        meta["cpu_launcher"] = cpu_launcher(args.dtypes)
        meta["cpu_calls"] = cpu_call_path(args.dtypes)
    out.mkdir(parents=True, exist_ok=True)
    print(_write(out, meta, records, cpu_records, args.schedules))
    return 0


if __name__ == "__main__":
    sys.exit(main())
