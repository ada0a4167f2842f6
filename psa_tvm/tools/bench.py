"""Benchmark forward and backward against the copy floor and the PyTorch peers.

Runs on the GPU host from prebuilt artifacts (no TVM there). For every shape and dtype it times,
in one process and on the same non-zero inputs: a device-to-device copy of the same bytes (the
floor), PyTorch eager, ``torch.compile`` (static per shape, and one dynamic-shape build), and each
of our schedules. Writes ``bench.json``, ``bench.md`` and ``bench.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import DTYPE_ITEMSIZE
from psa_tvm.presets import YOLO11
from psa_tvm.runtime import env
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, host_us_per_call

DTYPES = {name: getattr(torch, name) for name in DTYPE_ITEMSIZE}
PEERS = ("copy", "eager", "compile_static", "compile_dynamic")


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

    def merged_bytes(self, itemsize: int) -> int:
        return self.batch * 2 * self.num_heads * self.key_dim * self.n * itemsize


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


def run(args: argparse.Namespace) -> list[dict]:
    timer = GpuTimer(reps=args.reps)
    dynamic = (torch.compile(reference.merge, dynamic=True),
               torch.compile(reference.merge_backward, dynamic=True))
    records = []
    for dtype_name in args.dtypes:
        for shape in yolo_shapes(args.quick):
            records += time_shape(timer, shape, dtype_name, args.schedules, args.artifacts,
                                  dynamic)
    return records


def time_shape(timer: GpuTimer, shape: Shape, dtype_name: str, schedules: list[str],
               artifacts: str, dynamic: tuple) -> list[dict]:
    """Every implementation of both passes on one shape and dtype, same inputs."""
    dtype = DTYPES[dtype_name]
    itemsize = torch.finfo(dtype).bits // 8
    ops = {s: PsaMergeAttnRuntimeOp(shape.key_dim, shape.num_heads, dtype_name, schedule=s,
                                    artifacts=artifacts) for s in schedules}
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = shape.batch * shape.num_heads
    lo = torch.randn(rows, shape.n, shape.key_dim, device="cuda", dtype=dtype,
                     generator=gen) + 3  # + 3: never zero
    hi = torch.randn_like(lo) - 3
    merged = torch.empty(shape.batch, 2 * shape.num_heads * shape.key_dim, shape.height,
                         shape.width, device="cuda", dtype=dtype)
    grad = torch.randn(merged.shape, device="cuda", dtype=dtype, generator=gen) + 3
    d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
    src, dst = torch.cat([lo.view(-1), hi.view(-1)]), torch.empty_like(merged).view(-1)
    args_f = (lo, hi, shape.num_heads, shape.height, shape.width)
    args_b = (grad, shape.num_heads, shape.key_dim)
    static_fwd = torch.compile(reference.merge, dynamic=False)
    static_bwd = torch.compile(reference.merge_backward, dynamic=False)
    stream = torch.cuda.current_stream().cuda_stream
    spatial = (shape.height, shape.width)
    impls = {
        "forward": {
            "copy": lambda: dst.copy_(src),
            "eager": lambda: reference.merge(*args_f),
            "compile_static": lambda: static_fwd(*args_f),
            "compile_dynamic": lambda: dynamic[0](*args_f),
            **{s: (lambda op=op: op.launch_forward(lo, hi, merged, stream, spatial))
               for s, op in ops.items()},
        },
        "backward": {
            "copy": lambda: dst.copy_(src),
            "eager": lambda: reference.merge_backward(*args_b),
            "compile_static": lambda: static_bwd(*args_b),
            "compile_dynamic": lambda: dynamic[1](*args_b),
            **{s: (lambda op=op: op.launch_backward(grad, d_lo, d_hi, stream))
               for s, op in ops.items()},
        },
    }
    records = []
    moved = 2 * shape.merged_bytes(itemsize)
    for pass_, fns in impls.items():
        times = {name: timer.median_us(fn) for name, fn in fns.items()}
        for name, us in times.items():
            records.append({
                **asdict(shape), "n": shape.n, "dtype": dtype_name, "pass": pass_,
                "impl": name, "us": round(us, 3), "bytes_moved": moved,
                "gbps": round(moved / us / 1e3, 1),
                "fraction_of_copy": round(times["copy"] / us, 4),
            })
        line = "  ".join(f"{k}={v:8.1f}" for k, v in times.items())
        print(f"{dtype_name:8s} {pass_:8s} {shape.label:22s} {line}", flush=True)
    return records


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


def markdown(records: list[dict], schedules: list[str]) -> str:
    impls = [*schedules, "eager", "compile_static", "compile_dynamic"]
    head = ("| dtype | pass | shape | MB moved | copy us | "
            + " | ".join(f"{i} us (x copy)" for i in impls) + " |")
    lines = [head, "|" + "---|" * (5 + len(impls))]
    rows: dict[tuple, dict] = {}
    for r in records:
        rows.setdefault((r["dtype"], r["pass"], r["label"]), {})[r["impl"]] = r
    for (dtype, pass_, label), by_impl in rows.items():
        cells = [f"{by_impl[i]['us']:.1f} ({by_impl[i]['fraction_of_copy']:.2f})" for i in impls]
        mb = by_impl["copy"]["bytes_moved"] / 1e6
        lines.append(f"| {dtype} | {pass_} | {label} | {mb:.1f} | {by_impl['copy']['us']:.1f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(records: list[dict], schedules: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    impls = [*schedules, "eager", "compile_static", "compile_dynamic"]
    groups = [(d, p) for d in DTYPES for p in ("forward", "backward")
              if any(r["dtype"] == d and r["pass"] == p for r in records)]
    fig, axes = plt.subplots(len(groups), 1, figsize=(14, 3.2 * len(groups)), squeeze=False)
    for ax, (dtype, pass_) in zip(axes[:, 0], groups, strict=True):
        subset = [r for r in records if r["dtype"] == dtype and r["pass"] == pass_]
        labels = list(dict.fromkeys(r["label"] for r in subset))
        width = 0.8 / len(impls)
        for k, impl in enumerate(impls):
            values = [next(r["fraction_of_copy"] for r in subset
                           if r["label"] == lab and r["impl"] == impl) for lab in labels]
            ax.bar([i + k * width for i in range(len(labels))], values, width, label=impl)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(0.95, color="gray", lw=0.8, ls="--")
        ax.set_xticks([i + 0.4 for i in range(len(labels))], labels, rotation=45, ha="right",
                      fontsize=7)
        ax.set_ylabel("fraction of copy")
        ax.set_ylim(0, 1.3)
        ax.set_title(f"{dtype} {pass_}: achieved bandwidth / copy bandwidth")
    axes[0, 0].legend(ncol=len(impls), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``psa-tvm bench`` (and of ``scripts/bench.py``)."""
    parser.add_argument("--artifacts", default=None,
                        help="artifact directory (default: $PSA_TVM_ARTIFACTS)")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--schedules", nargs="+", default=["tiled", "rowwise"])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="a subset of the shapes")
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


def run_command(args: argparse.Namespace) -> int:
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
    if args.replot:
        data = json.loads(Path(args.replot).read_text())
        schedules = [s for s in dict.fromkeys(r["impl"] for r in data["records"])
                     if s not in PEERS]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot(data["records"], schedules, out / "bench.png")
        (out / "bench.md").write_text(markdown(data["records"], schedules) + "\n")
        return 0
    if not torch.cuda.is_available() or not args.artifacts:
        print("psa-tvm bench needs a CUDA GPU and --artifacts (or PSA_TVM_ARTIFACTS)",
              file=sys.stderr)
        return 2
    torch._dynamo.config.cache_size_limit = 1024
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = run(args)
    meta = {"gpu": torch.cuda.get_device_name(), "date": date.today().isoformat(),
            "torch": torch.__version__, "python": platform.python_version(),
            "host_overhead": host_overhead(args.artifacts)}
    (out / "bench.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    table = markdown(records, args.schedules)
    (out / "bench.md").write_text(f"{meta['gpu']}, {meta['date']}, torch {meta['torch']}\n\n"
                                  f"{table}\n\nhost overhead: {meta['host_overhead']}\n")
    plot(records, args.schedules, out / "bench.png")
    print(table)
    print("host overhead per call:", meta["host_overhead"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
