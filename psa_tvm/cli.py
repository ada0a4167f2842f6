"""``psa-tvm``: demo, build, inspect, bench and tune from the command line."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import sys
import tempfile
import time

from psa_tvm.config import DTYPE_ITEMSIZE, OpConfig


def _add_config_args(parser: argparse.ArgumentParser, many: bool = False) -> None:
    nargs = "+" if many else None
    parser.add_argument("--key-dim", type=int, nargs=nargs, default=[32] if many else 32)
    parser.add_argument("--num-heads", type=int, nargs=nargs, default=[4] if many else 4)
    parser.add_argument("--dtype", nargs=nargs, choices=sorted(DTYPE_ITEMSIZE),
                        default=["float32"] if many else "float32")


def _timed(fn, repeat: int = 20) -> float:
    """Median wall time of ``fn()`` in microseconds (``fn`` synchronizes itself)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e6


def cmd_demo(args: argparse.Namespace) -> int:
    import torch

    from psa_tvm import merge, merge_backward, reference
    from psa_tvm.errors import ArtifactNotFoundError
    from psa_tvm.runtime import env

    config = OpConfig(args.key_dim, args.num_heads, args.dtype)
    device = "cuda" if args.device in (None, "cuda") and torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and device != "cuda":
        print("psa-tvm demo: no usable CUDA GPU here, running on the CPU", file=sys.stderr)
    if device == "cuda" and args.device is None:
        try:  # the GPU path needs artifacts, or the compiler to build them now
            from psa_tvm.ops import _runtime_op

            _runtime_op(config.key_dim, config.num_heads, config.dtype)
        except (ArtifactNotFoundError, ImportError, RuntimeError) as err:
            print(f"psa-tvm demo: cannot use the GPU ({err}); running on the CPU.",
                  file=sys.stderr)
            device = "cpu"
    if device == "cpu":
        try:
            from psa_tvm.runtime.cpu import cpu_kernels

            cpu_kernels(config)
        except ArtifactNotFoundError as err:
            print(f"psa-tvm demo: {err}", file=sys.stderr)
            return 2
    dtype = getattr(torch, config.dtype)
    B, H, W, nh, kd = args.batch, args.height, args.width, config.num_heads, config.key_dim
    gen = torch.Generator().manual_seed(0)
    lo = torch.randn(B * nh, H * W, kd, generator=gen).to(device, dtype)
    hi = torch.randn(B * nh, H * W, kd, generator=gen).to(device, dtype)
    grad = torch.randn(B, 2 * nh * kd, H, W, generator=gen).to(device, dtype)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    merged = merge(lo, hi, nh, H, W)
    d_lo, d_hi = merge_backward(grad, nh, kd)
    sync()
    first_call = time.perf_counter() - start
    ok_fwd = torch.equal(merged, reference.merge(lo, hi, nh, H, W))
    ref_lo, ref_hi = reference.merge_backward(grad, nh, kd)
    ok_bwd = torch.equal(d_lo, ref_lo) and torch.equal(d_hi, ref_hi)
    fwd_us = _timed(lambda: (merge(lo, hi, nh, H, W), sync()))
    bwd_us = _timed(lambda: (merge_backward(grad, nh, kd), sync()))
    print(f"psa-tvm demo on {device} ({config.tag})")
    print(f"  lo, hi   : {list(lo.shape)} {config.dtype}")
    print(f"  merged   : {list(merged.shape)}   forward  exact: {ok_fwd}   {fwd_us:9.1f} us wall")
    print(f"  d_lo,d_hi: {list(d_lo.shape)}   backward exact: {ok_bwd}   {bwd_us:9.1f} us wall")
    print(f"  first call (build or load included): {first_call:.2f} s")
    print(f"  artifacts: {env.default_artifacts_dir()}")
    return 0 if ok_fwd and ok_bwd else 1


def _requests(args: argparse.Namespace, schedules: list[str]):
    from psa_tvm.compiler.artifact import BuildRequest
    from psa_tvm.compiler.rules import get_rule
    from psa_tvm.compiler.shifted import tuned_params
    from psa_tvm.runtime.tuned import tuned_entry

    for config, schedule in itertools.product(_configs(args), schedules):
        rule = get_rule(schedule)
        shifted = tuned_params(config, args.arch) if schedule == "tiled" else None
        yield BuildRequest(config, schedule, shifted_params=shifted)
        for arch in args.arch:
            for pass_ in ("forward", "backward"):
                tuned = tuned_entry(arch, pass_, config)
                if tuned and tuned["schedule"] == schedule:
                    yield BuildRequest(config, schedule, rule.params_from_dict(tuned["params"]),
                                       shifted_params=shifted)


def _configs(args: argparse.Namespace) -> list[OpConfig]:
    if args.preset:
        from psa_tvm.presets import PRESETS

        return list(dict.fromkeys(c for name in args.preset for c in PRESETS[name]))
    return [OpConfig(kd, nh, dtype) for kd, nh, dtype
            in itertools.product(args.key_dim, args.num_heads, args.dtype)]


def cmd_build(args: argparse.Namespace) -> int:
    _require_compiler("psa-tvm build")
    from psa_tvm.compiler.artifact import build_artifacts
    from psa_tvm.compiler.rules import RULES

    schedules = args.schedule or sorted(RULES)
    requests = list(dict.fromkeys(_requests(args, schedules))) if "cuda" in args.target else []
    if args.attention and "cuda" in args.target:  # the attention layout family, tiled only
        from psa_tvm.compiler.artifact import BuildRequest
        from psa_tvm.layouts import STREAM_OPS

        requests += [BuildRequest(config, "tiled", op=op)
                     for config in _configs(args) for op in STREAM_OPS]
    cpu_configs = _configs(args) if "cpu" in args.target else []
    path = build_artifacts(requests, args.output, args.arch, jobs=args.jobs,
                           compiler=args.compiler, progress=not args.quiet,
                           cpu_configs=cpu_configs)
    print(f"wrote {len(requests)} GPU builds for {args.arch} and {len(cpu_configs)} CPU "
          f"libraries to {path}")
    from psa_tvm.runtime.native import library_path

    native = library_path(path.parent)
    if native is not None:
        print(f"wrote the native library {native} (docs/native.md)")
    return 0


def _require_compiler(command: str) -> None:
    """Exit with what to install when the compiler half (TVM) is missing."""
    try:
        missing = importlib.util.find_spec("tvm") is None
    except ImportError:  # a finder that refuses it: not importable either
        missing = True
    if missing:
        raise SystemExit(f"{command} needs the compiler (Apache TVM): "
                         "pip install 'psa-tvm[compiler]'")


def cmd_inspect(args: argparse.Namespace) -> int:
    _require_compiler("psa-tvm inspect")
    from psa_tvm.compiler.compute import merge_backward, merge_forward

    config = OpConfig(args.key_dim, args.num_heads, args.dtype)
    if args.schedule is None:
        print(merge_forward(config).script())
        print(merge_backward(config).script())
        return 0
    from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
    from psa_tvm.runtime.manifest import Manifest
    from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp

    batch, height, width = args.shape
    with tempfile.TemporaryDirectory() as tmp:
        build_artifacts([BuildRequest(config, args.schedule)], tmp, [args.arch], native=False)
        build = Manifest.load(tmp).find(config, args.schedule)
        op = PsaMergeAttnRuntimeOp(config.key_dim, config.num_heads, config.dtype,
                                   schedule=args.schedule, artifacts=tmp, arch=args.arch)
        rows, n = batch * config.num_heads, height * width
        plans = {"forward": op.plan_forward([(rows, n, config.key_dim)] * 2),
                 "backward": op.plan_backward((batch, config.channels, height, width))}
        if "cuda" in args.show:
            print(build.source.read_text())
        print(f"# schedule {build.schedule} {json.dumps(build.schedule_params)}")
        for pass_, plan in plans.items():
            kernel = plan.kernel
            print(f"\n## {pass_} for B={batch}, H={height}, W={width}: {kernel.entry}")
            shifted = (f" shifted (16-byte N side for any N, from {kernel.min_numel} elements)"
                       if kernel.shifted else "")
            if kernel.band:
                upto = f" to {kernel.max_numel}" if kernel.max_numel else ""
                shifted = (f" band of {kernel.band} rows (N {kernel.min_n}-{kernel.max_n}, from "
                           f"{kernel.min_numel}{upto} elements, persistent grid)")
            print(f"   variant     : vec={kernel.vec} vec_kd={kernel.vec_kd} "
                  f"{kernel.index_dtype}{shifted}")
            print("   parameters  : " + ", ".join(
                f"{p.name}:{p.kind}" + (f"<-{p.tensor}" if p.tensor else "")
                for p in kernel.params))
            print(f"   grid        : {list(kernel.grid)} = {list(plan.grid)}")
            print(f"   block       : {list(kernel.block)} = {list(plan.block)}")
            print(f"   dynamic smem: {plan.shared_bytes} B")
            print("   arguments   : " + ", ".join(f"{n}={v}" for k, n, v in plan.args
                                                   if k != "ptr"))
        if "resources" in args.show:
            print("\n## nvcc -Xptxas -v (per kernel)")
            for kernel in build.kernels:
                for arch, res in sorted(kernel.resources.items()):
                    print(f"   {kernel.entry:36s} {arch}: {res['registers']:3d} regs, "
                          f"{res['smem_bytes']:6d} B smem, {res['stack_frame']} B stack, "
                          f"spills {res['spill_stores']}/{res['spill_loads']} B")
    return 0


def cmd_torch_ext(args: argparse.Namespace) -> int:
    """Build (or find in the cache) the optional PyTorch extension, ahead of the first call."""
    from psa_tvm.runtime import torch_ext

    reason = torch_ext._why_not()
    if reason is not None:
        print(f"psa-tvm: cannot build the PyTorch extension: {reason}", file=sys.stderr)
        return 1
    module = torch_ext.build_and_load(verbose=args.verbose)
    print(f"psa-tvm: the PyTorch extension is built: {module.__file__}")
    return 0


_TOOLS = {"bench": "benchmark against copy, eager and torch.compile (GPU host)",
          "tune": "tune schedule parameters: build | run | select"}


def main(argv: list[str] | None = None) -> int:
    from psa_tvm.runtime.env import DEFAULT_ARCH, DEFAULT_ARCHS

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="psa-tvm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run and check the op for a YOLO configuration")
    _add_config_args(demo)
    demo.add_argument("--batch", type=int, default=1)
    demo.add_argument("--height", type=int, default=20)
    demo.add_argument("--width", type=int, default=20)
    demo.add_argument("--device", choices=["cpu", "cuda"], default=None)
    demo.set_defaults(func=cmd_demo)

    build = sub.add_parser("build", help="build artifacts: GPU kernels (fatbin) and CPU "
                                         "libraries, with their manifest (needs the compiler)")
    _add_config_args(build, many=True)
    build.add_argument("--preset", nargs="+", choices=["tests", "yolo11"], default=None,
                       help="named config sets (instead of --key-dim/--num-heads/--dtype)")
    build.add_argument("--target", nargs="+", choices=["cuda", "cpu"], default=["cuda", "cpu"])
    build.add_argument("--arch", nargs="+", default=list(DEFAULT_ARCHS))
    build.add_argument("--schedule", nargs="+", default=None, help="default: every rule")
    build.add_argument("-o", "--output", required=True)
    build.add_argument("-j", "--jobs", type=int, default=None)
    build.add_argument("--compiler", choices=["auto", "nvcc", "nvrtc"], default="auto")
    build.add_argument("-q", "--quiet", action="store_true")
    build.add_argument("--attention", action="store_true",
                       help="also build the attention layout ops (pack, merge; psa_attention)")
    build.set_defaults(func=cmd_build)

    inspect = sub.add_parser("inspect", help="print TensorIR, CUDA, parameters, launch config")
    _add_config_args(inspect)
    inspect.add_argument("--schedule", default=None,
                         help="without it: the TensorIR; with it: that schedule's kernels")
    inspect.add_argument("--shape", type=int, nargs=3, default=(1, 20, 20),
                         metavar=("B", "H", "W"))
    inspect.add_argument("--arch", default=DEFAULT_ARCH)
    inspect.add_argument("--show", nargs="+", default=["cuda", "resources"],
                         choices=["cuda", "resources", "launch"])
    inspect.set_defaults(func=cmd_inspect)

    ext = sub.add_parser("torch-ext", help="build the optional PyTorch extension ahead of "
                                           "time (needs a C++ compiler and ninja)")
    ext.add_argument("-v", "--verbose", action="store_true")
    ext.set_defaults(func=cmd_torch_ext)

    for name, summary in _TOOLS.items():
        tool = sub.add_parser(name, help=summary)
        if argv and argv[0] == name:  # the tool's own arguments (importing it costs torch)
            module = importlib.import_module(f"psa_tvm.tools.{name}")
            module.add_arguments(tool)
            if hasattr(module, "run_command"):  # else its subcommands set func
                tool.set_defaults(func=module.run_command)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
