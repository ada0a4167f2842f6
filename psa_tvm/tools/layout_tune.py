"""Tuning the attention layout family's ``tiled`` parameters (issue 10: >= 0.95 of a copy).

Two halves, run on two machines:

- ``build`` (needs TVM, no GPU): one artifact directory per candidate ``TiledParams`` for each
  family op and configuration. Candidate builds hold only the kernel a benchmark shape runs
  (16-byte accesses on both sides, int32 indexing, sm_90), which makes a grid of them cheap to
  compile; the chosen parameters are then built in full by ``psa-tvm build --attention``.
- ``time`` (needs a CUDA GPU and torch, no TVM): every candidate and the defaults at the
  benchmark shapes, GPU kernel time from torch.profiler against a device copy of the output's
  size, bytes read + written (as :func:`psa_tvm.tools.bench_attention.bench_layout`).
  Candidates are timed in one profiler session per shape, interleaved in rounds (the host's
  load drifts), each keeping its best round.

``python -m psa_tvm.tools.layout_tune build -o DIR`` / ``... time DIR --out OUT``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path

from psa_tvm.config import OpConfig
from psa_tvm.layouts import GATHER_OUTPUT, SCATTER_OUTPUT, STREAM_OPS

# (dim, batch, H=W) of issue 10's layout measurements; nh = dim // 64, kd = 32.
SHAPES = ((384, 16, 40), (256, 64, 80), (256, 16, 40), (384, 32, 20))
KEY_DIM = 32


def candidate_params(config: OpConfig) -> Iterator[dict]:
    """The grid: tile sizes, threads, threads per kd-row (1..4: the bnhd side's rows are
    ``kd`` elements strided by ``nh*S*kd``, so a warp touching fewer rows with wider pieces
    may coalesce better), row padding. Invalid combinations are left out by the rule's own
    check."""
    from psa_tvm.compiler.rules.tiled import Tiled, TiledParams

    rule = Tiled()
    for slices_on_x, tile_n, threads, row_threads, pad in itertools.product(
            (False, True), (64, 128, 256), (128, 256), (1, 2, 4), (16, 32)):
        params = TiledParams(tile_n=tile_n, threads=threads, row_threads=row_threads,
                             pad_bytes=pad, slices_on_x=slices_on_x)
        try:
            rule.check_params(config, params)
        except ValueError:
            continue
        yield asdict(params)


# The second, small grid (docs/attention.md, "Several slices per CTA, tiles that divide N"):
# (tile_n, threads, row_threads, slices_per_cta, heads_inner, pad_bytes). The default and the
# first grid's best sets, tiles dividing the YOLO N's (400, 1600, 6400 are multiples of 40 and
# 80), and CTAs moving k consecutive streams (heads_inner: heads) of one spatial tile, i.e.
# k*kd contiguous elements of each bnhd row.
CTA_GRID = (
    (128, 128, 2, 1, False, 16), (64, 128, 4, 1, False, 16), (64, 256, 4, 1, False, 16),
    (64, 256, 4, 1, False, 32), (128, 128, 4, 1, False, 32),
    (80, 160, 4, 1, False, 16), (80, 160, 4, 1, False, 32), (80, 160, 2, 1, False, 16),
    (80, 320, 4, 1, False, 16), (40, 160, 4, 1, False, 16), (200, 160, 4, 1, False, 16),
    (400, 320, 4, 1, False, 16),
    (64, 128, 4, 2, False, 16), (80, 160, 4, 2, False, 16), (80, 160, 4, 2, False, 32),
    (64, 256, 4, 4, False, 16), (80, 320, 4, 4, False, 16),
    (64, 128, 4, 2, True, 16), (80, 160, 4, 2, True, 16), (80, 160, 4, 2, True, 32),
    (80, 320, 4, 4, True, 16), (64, 192, 4, 3, True, 16),
)


def _checked(config: OpConfig, sets: Iterable) -> Iterator[dict]:
    """The ``TiledParams`` of ``sets`` that pass the rule's own check, as stored."""
    from psa_tvm.compiler.rules.base import params_as_dict
    from psa_tvm.compiler.rules.tiled import Tiled

    rule = Tiled()
    for params in sets:
        try:
            rule.check_params(config, params)
        except ValueError:
            continue
        yield params_as_dict(params)


def _grouping(config: OpConfig, op: str, rows: Iterable[tuple]) -> Iterator[dict]:
    """Rows ``(tile_n, threads, row_threads, slices_per_cta, heads_inner, pad_bytes)`` whose
    ``slices_per_cta`` divides the op's streams (heads with ``heads_inner``), checked."""
    from psa_tvm.compiler.rules.tiled import TiledParams

    streams = STREAM_OPS[op].num_streams
    return _checked(config, (
        TiledParams(tile_n=tile_n, threads=threads, row_threads=row_threads, pad_bytes=pad,
                    slices_per_cta=slices, heads_inner=heads_inner)
        for tile_n, threads, row_threads, slices, heads_inner, pad in rows
        if (config.num_heads if heads_inner else streams) % slices == 0))


def cta_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """:data:`CTA_GRID` for one family op: the sets whose ``slices_per_cta`` divides the op's
    streams (heads with ``heads_inner``) and that pass the rule's check."""
    return _grouping(config, op, CTA_GRID)


# The whole-heads grid: a CTA moves every stream of several adjacent heads (slices_per_cta a
# multiple of S; heads_inner ops: several heads of one stream), so its bnhd-side piece per
# position is up to the whole row (nh*S*kd elements): (heads per CTA, tile_n, threads,
# row_threads); sets whose shared tile would pass 46 KB (static shared memory stops at 48) are
# left out.
WIDE_TILES = (16, 32, 64)
WIDE_THREADS = (128, 192, 256, 384, 512)
WIDE_ROW_THREADS = (2, 4)
_STATIC_SMEM_BYTES = 46 * 1024


# After the whole-heads grid (docs/bench-layout/wide_tune_h200.md): its winner for attn_flash,
# two heads of a stream per CTA with 256 threads and 2 threads per kd row, and that shape of
# CTA for the other ops (two streams of a head: slices_per_cta=2 without heads_inner).
# (tile_n, threads, row_threads, slices_per_cta, heads_inner, pad_bytes)
FOLLOW_UP = ((64, 256, 2, 2, True, 16), (64, 128, 2, 2, True, 16), (64, 256, 4, 2, True, 16),
             (64, 256, 2, 2, False, 16), (64, 128, 2, 2, False, 16), (64, 256, 4, 2, False, 16),
             (128, 256, 2, 2, False, 16), (128, 256, 2, 2, True, 16))


def follow_up_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """:data:`FOLLOW_UP` for one op, where it groups the op's slices."""
    return _grouping(config, op, FOLLOW_UP)


def _variations(config: OpConfig, owns: Iterable, axes: dict[str, Iterable]) -> Iterator[dict]:
    """Each of the ``owns`` params with every combination of ``axes`` (field -> values), in
    product order, checked, the ``owns`` themselves left out (:func:`build` adds them)."""
    from dataclasses import replace

    owns = list(owns)
    sets = [replace(own, **dict(zip(axes, values, strict=True)))
            for own in owns for values in itertools.product(*axes.values())]
    return _checked(config, [p for p in dict.fromkeys(sets) if p not in owns])


def skew_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """Each op's own params with its row threads and with whole positions per warp access on
    the kd side (``row_threads = key_dim / vec``), without and with the tiled rule's
    ``group_pad_bytes`` skew (32 bytes), at the own thread count and twice it (docs/perf.md
    v14). The own params themselves are added by :func:`build`."""
    from psa_tvm.compiler.artifact import BuildRequest
    from psa_tvm.compiler.rules.tiled import Tiled

    own = BuildRequest(config, "tiled", op=op).resolved_params()
    whole = config.key_dim // Tiled().vector_width(config, own)
    return _variations(config, [own], {"threads": (own.threads, 2 * own.threads),
                                       "row_threads": (own.row_threads, whole),
                                       "group_pad_bytes": (0, 32)})


def gather_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """The gather's (the ``forward`` pass: the NCHW side written along N) own params with the
    tile sizes, thread counts and kd-row sharing the merge's tuned forwards use (kd=32 nh=4
    16-bit: 128 positions, 128 threads, one thread per kd row; docs/perf.md v15), keeping the
    op's CTA grouping (``slices_per_cta``, ``heads_inner``). The own params are added by
    :func:`build`."""
    from psa_tvm.compiler.artifact import BuildRequest

    own = BuildRequest(config, "tiled", op=op).resolved_pass_params()["forward"]
    return _variations(config, [own], {"tile_n": (64, 128), "threads": (128, 256, 512),
                                       "row_threads": dict.fromkeys((1, 2, own.row_threads))})


def divides_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """Each pass's own params with tiles that divide every YOLO square's N (400, 1600, 6400 are
    multiples of 40 and 80; the own 64-position tiles leave 20x20 a quarter-full last tile) at
    80-320 threads. The own params are added by :func:`build`."""
    from psa_tvm.compiler.artifact import BuildRequest

    owns = BuildRequest(config, "tiled", op=op).resolved_pass_params().values()
    return _variations(config, owns, {"tile_n": (40, 80), "threads": (80, 160, 320)})


def stage_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """Each pass's own params with the tiled rule's register stage (``stage_loads``: a thread
    issues all of its global loads before its first shared-memory store), at 128 and 256
    threads (fewer threads: more loads in flight per thread) and 64- and 128-position tiles.
    The own params are added by :func:`build`."""
    from psa_tvm.compiler.artifact import BuildRequest

    owns = BuildRequest(config, "tiled", op=op).resolved_pass_params().values()
    return _variations(config, owns, {"stage_loads": (True,), "tile_n": (64, 128),
                                      "threads": (128, 256)})


def stage_wide_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """After ``--grid stage``: the staged gathers with 32-position tiles too (twice the CTAs:
    a 20x20 batch-16 or 80x80 batch-1 grid fills less than one wave of the H200's SMs),
    64-256 threads and 1, 2 or the own threads per kd row. The own params are added by
    :func:`build`."""
    return _staged_gather(config, op, lambda own: {
        "tile_n": (32, 64, 128), "threads": (64, 128, 256),
        "row_threads": tuple(dict.fromkeys((1, 2, own.row_threads)))})


def stage_divides_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """The staged gathers with tiles that divide every YOLO square's N (40, 80, 200: 400 =
    5 x 80 = 2 x 200 positions at 20x20, where 64-position tiles leave a quarter-full last one)
    at 64-320 threads, 2 or 4 threads per kd row. The own params are added by
    :func:`build`."""
    return _staged_gather(config, op, lambda own: {
        "tile_n": (40, 80, 200), "threads": (64, 160, 320), "row_threads": (2, 4)})


def stage_coalesced_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """The staged gathers in the unstaged kernel's load order (``stage_coalesced``: one warp
    instruction reads consecutive positions' pieces, contiguous memory) at 64- and
    128-position tiles, 128-512 threads, 2 or 4 threads per kd row. The own params are added
    by :func:`build`."""
    return _staged_gather(config, op, lambda own: {
        "tile_n": (64, 128), "threads": (128, 256, 512), "row_threads": (2, 4)},
        stage_coalesced=True)


def _staged_gather(config: OpConfig, op: str, axes_of, **fixed) -> Iterator[dict]:
    """The gather's own params with the register stage (and ``fixed``), varied over
    ``axes_of(own)``."""
    from dataclasses import replace

    from psa_tvm.compiler.artifact import BuildRequest

    own = BuildRequest(config, "tiled", op=op).resolved_pass_params()["forward"]
    return _variations(config, [replace(own, stage_loads=True, **fixed)], axes_of(own))


def wide_candidate_params(config: OpConfig, op: str) -> Iterator[dict]:
    """The whole-heads grid for one family op (see :data:`WIDE_TILES`)."""
    from psa_tvm.compiler.rules.tiled import TiledParams

    spec = STREAM_OPS[op]
    # a stream per tensor (flash's dq/dk/lo/hi): a CTA's heads of one stream are adjacent
    heads_inner = all(chunk == 0 for sources in spec.streams for _, chunk in sources)
    nh = config.num_heads
    per_cta = sorted({h for h in (2, nh // 2, nh) if h > 1 and nh % h == 0})
    sets = []
    for heads, tile_n, threads, row_threads in itertools.product(
            per_cta, WIDE_TILES, WIDE_THREADS, WIDE_ROW_THREADS):
        slices = heads if heads_inner else heads * spec.num_streams
        if slices * config.key_dim * (tile_n + 8) * config.itemsize <= _STATIC_SMEM_BYTES:
            sets.append(TiledParams(tile_n=tile_n, threads=threads, row_threads=row_threads,
                                    slices_per_cta=slices, heads_inner=heads_inner))
    return _checked(config, sets)


#: ``build --grid`` name -> its candidates for (config, op), as dicts of TiledParams fields.
GRIDS = {
    "base": lambda config, op: candidate_params(config),
    "cta": cta_candidate_params,
    "wide": wide_candidate_params,
    "follow-up": follow_up_candidate_params,
    "skew": skew_candidate_params,
    "gather": gather_candidate_params,
    "divides": divides_candidate_params,
    "stage": stage_candidate_params,
    "stage-wide": stage_wide_candidate_params,
    "stage-divides": stage_divides_candidate_params,
    "stage-coalesced": stage_coalesced_candidate_params,
}


def build(out: Path, num_heads: list[int], dtypes: list[str], ops: list[str],
          jobs: int, grid: str = "base") -> None:
    if grid not in GRIDS:
        raise ValueError(f"grid: expected one of {list(GRIDS)}, got {grid!r}")
    from psa_tvm.compiler import artifact
    from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
    from psa_tvm.compiler.rules.tiled import TiledParams

    # Candidates: the widest kernel only (the benchmark shapes are multiples of 8 with aligned
    # data), int32. Patched for this process only: full builds are the normal ones.
    artifact.variant_widths = lambda full, index_dtype: [(full, full)]
    artifact.INDEX_DTYPES = ("int32",)
    requests = []
    for nh, dtype, op in itertools.product(num_heads, dtypes, ops):
        config = OpConfig(KEY_DIM, nh, dtype)
        cands = GRIDS[grid](config, op)
        if grid not in ("base", "cta"):  # each pass's own params too, timed in the same sessions
            owns = BuildRequest(config, "tiled", op=op).resolved_pass_params().values()
            cands = [*cands, *(asdict(own) for own in dict.fromkeys(owns))]  # each pass's
        for params in cands:
            requests.append(BuildRequest(config, "tiled", TiledParams(**params),
                                         preferred=False, op=op))
    print(f"{len(requests)} candidate builds", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    # What an untuned build uses: the rule's default per configuration ("<tag>"), and an op's
    # own params where it has them ("<tag>/<op>", compiler/family_defaults.py).
    from psa_tvm.compiler.rules.tiled import Tiled
    defaults = {}
    for nh, d in itertools.product(num_heads, dtypes):
        config = OpConfig(KEY_DIM, nh, d)
        defaults[config.tag] = asdict(Tiled().default_params(config))
        for op in ops:
            request = BuildRequest(config, "tiled", op=op)
            own = request.resolved_params()
            if own != Tiled().default_params(config):
                defaults[f"{config.tag}/{op}"] = asdict(own)
            for pass_, params in request.own_pass_params().items():  # a pass's own set
                defaults[f"{config.tag}/{op}/{pass_}"] = params
    (out / "defaults.json").write_text(json.dumps(defaults))
    start = time.perf_counter()
    build_artifacts(requests, out, ["sm_90"], jobs=jobs, keep_going=True, native=False)
    print(f"built in {time.perf_counter() - start:.0f} s", flush=True)


# ----------------------------------------------------------------------------- GPU half
# Shapes per stage: issue 10's four first, then num_heads 2 and 8.
EXTRA_SHAPES = ((128, 64, 80), (128, 16, 40), (512, 16, 40), (512, 8, 80))


def params_key(params: dict) -> str:
    """``t<tile_n>/<threads>/r<row_threads>/p<pad_bytes>``, then ``/x`` (``slices_on_x``),
    ``/k<slices_per_cta>``, ``/h`` (``heads_inner``), ``/g<group_pad_bytes>``, ``/s``
    (``stage_loads``, ``/sc`` with ``stage_coalesced``) and ``/n<narrow_tile_n>x
    <narrow_threads>`` where set. Distinct params give distinct keys: the timings are keyed
    by them."""
    return (f"t{params['tile_n']}/{params['threads']}/r{params['row_threads']}/"
            f"p{params['pad_bytes']}" + ("/x" if params.get("slices_on_x") else "")
            + (f"/k{params['slices_per_cta']}" if params.get("slices_per_cta", 1) > 1 else "")
            + ("/h" if params.get("heads_inner") else "")
            + (f"/g{params['group_pad_bytes']}" if params.get("group_pad_bytes") else "")
            + ("/s" if params.get("stage_loads") else "")
            + ("c" if params.get("stage_coalesced") else "")
            + (f"/n{params.get('narrow_tile_n', 0)}x{params.get('narrow_threads', 0)}"
               if params.get("narrow_tile_n") or params.get("narrow_threads") else ""))


def _profile_rounds(calls: dict, iters: int, rounds: int) -> dict:
    """Best per-call GPU time (us) of each call over ``rounds`` interleaved rounds of ``iters``
    launches each, in one profiler session (kernels split in launch order); one session per
    call if the kernel count is not the expected one."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def session(keys: list, n_rounds: int) -> dict | None:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n_rounds):
                for key in keys:
                    for _ in range(iters):
                        calls[key]()
            torch.cuda.synchronize()
        events = sorted((e for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.CUDA),
                        key=lambda e: e.time_range.start)
        if len(events) != n_rounds * len(keys) * iters:
            return None
        best: dict = {}
        for i, key in enumerate(keys * n_rounds):
            chunk = events[i * iters:(i + 1) * iters]
            per_call = sum(e.time_range.elapsed_us() for e in chunk) / iters
            best[key] = min(best.get(key, float("inf")), per_call)
        return best

    for fn in calls.values():  # warm-up: module loads, plans
        fn()
    torch.cuda.synchronize()
    best = session(list(calls), rounds)
    if best is None:
        best = {}
        for key in calls:
            one = session([key], rounds)
            if one is not None:
                best.update(one)
    return best


def _flushed(calls: dict, profiler) -> dict:
    """Median kernel time (us) of each call after an L2 flush (the issue's timing; the layout
    benchmark's), candidates one after the other."""
    for fn in calls.values():
        fn()
    return {key: profiler.median_us(fn) or float("nan") for key, fn in calls.items()}


def time_pass(name: str, pass_: str, dim: int, batch: int, size: int, dtype_name: str,
              cands: dict, root_of: dict, iters: int, rounds: int,
              profiler=None) -> list[dict]:
    """Every candidate build in ``cands`` (key -> BuildSpec) of one op pass at one shape; warm
    L2 in interleaved rounds, or flushed with ``profiler`` (a ``KernelProfiler``)."""
    import torch

    from psa_tvm.reference import same_bits
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp

    op = STREAM_OPS[name]
    nh, n = dim // 64, size * size
    dtype = getattr(torch, dtype_name)
    stream = torch.cuda.current_stream().cuda_stream
    shapes = op.kernel_shapes(pass_, batch, n, nh, KEY_DIM)
    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors = {t: torch.randn(s, device="cuda", dtype=dtype, generator=gen)
               for t, s in shapes.items()}
    output = GATHER_OUTPUT if pass_ == "forward" else SCATTER_OUTPUT
    read = sum(t.numel() for k, t in tensors.items() if k != output)
    # warm: a copy of the output's size (rounds interleaved); flushed: of the bytes read +
    # written, as the layout benchmark's
    copied = tensors[output].numel() if profiler is None else (read + tensors[output].numel()) // 2
    src = torch.randn(copied, device="cuda", dtype=dtype, generator=gen)
    dst = torch.empty_like(src)
    calls = {"copy": lambda: dst.copy_(src)}
    for key, build in cands.items():
        runtime = PsaStreamRuntimeOp(name, KEY_DIM, nh, dtype_name, artifacts=root_of[key])
        runtime._builds = {p: build for p in op.passes}  # this candidate, both passes

        def call(runtime=runtime):
            runtime.launch(pass_, tensors, batch, n, stream)
        calls[key] = call
    best = _profile_rounds(calls, iters, rounds) if profiler is None else _flushed(calls, profiler)
    # Every candidate must write what the first one writes (outputs poisoned first).
    reference, wrong = None, set()
    for key in cands:
        tensors[output].fill_(float("nan"))
        calls[key]()
        got = tensors[output].clone()
        if reference is None:
            reference = got
        elif not same_bits(got, reference):
            wrong.add(key)
    moved = (read + tensors[output].numel()) * src.element_size()
    copy_gbps = 2 * dst.numel() * src.element_size() / best["copy"] / 1e3
    return [{"op": name, "pass": pass_, "dim": dim, "nh": nh, "batch": batch, "size": size,
             "dtype": dtype_name, "cand": key, "params": cands[key].schedule_params,
             "mbytes": round(moved / 1e6, 1),
             "kernel_us": round(us, 2), "copy_us": round(best["copy"], 2),
             "fraction": round(moved / us / 1e3 / copy_gbps, 4), "mismatch": key in wrong}
            for key, us in best.items() if key != "copy"]


def time_candidates(roots: list[Path], out: Path, iters: int, rounds: int, top: int,
                    budget_s: float, flush: bool = False,
                    passes: tuple[str, ...] = ("forward", "backward"),
                    shapes: tuple[tuple[int, int, int], ...] = (*SHAPES, *EXTRA_SHAPES)
                    ) -> tuple[list[dict], dict]:
    """float16: every candidate at every shape (``(dim, batch, H=W)``); bfloat16: the ``top``
    float16 winners per (op, pass, num_heads) plus the default. ``flush``: L2 flushed before
    every run."""
    profiler = None
    if flush:
        from psa_tvm.tools.timing import GpuTimer, KernelProfiler

        profiler = KernelProfiler(GpuTimer(reps=5), reps=15)
    from psa_tvm.runtime.manifest import Manifest

    start = time.perf_counter()
    builds: dict = {}  # (op, nh, dtype) -> {key: build}
    root_of: dict = {}
    defaults: dict = {}
    for root in roots:
        if (root / "defaults.json").is_file():
            defaults.update(json.loads((root / "defaults.json").read_text()))
        for b in Manifest.load(root).builds:
            if b.op != "merge" and b.config.key_dim == KEY_DIM:
                key = params_key(b.schedule_params)
                builds.setdefault((b.op, b.config.num_heads, b.config.dtype), {})[key] = b
                root_of[key, b.op, b.config.num_heads, b.config.dtype] = root
    records: list[dict] = []

    def stage(dtype_name: str, pick) -> None:
        for dim, batch, size in shapes:
            nh = dim // 64
            for name, op in STREAM_OPS.items():
                cands = builds.get((name, nh, dtype_name))
                if not cands:
                    continue
                for pass_ in (p for p in op.passes if p in passes):
                    chosen = pick(name, pass_, nh, cands)
                    if time.perf_counter() - start > budget_s:
                        records.append({"skipped": f"budget: {dtype_name} {name} {pass_} "
                                                   f"{dim},{batch},{size}"})
                        return
                    try:
                        records.extend(time_pass(
                            name, pass_, dim, batch, size, dtype_name, chosen,
                            {k: root_of[k, name, nh, dtype_name] for k in chosen},
                            iters, rounds, profiler))
                    except Exception as err:  # keep going: one failure loses one row
                        records.append({"op": name, "pass": pass_, "dim": dim, "batch": batch,
                                        "size": size, "dtype": dtype_name,
                                        "error": f"{type(err).__name__}: {str(err)[:300]}"})
                    (out / "layout_tune.json").write_text(json.dumps(
                        {"defaults": defaults, "records": records}, indent=0))
            print(f"{dtype_name} {dim},{batch},{size} done at "
                  f"{time.perf_counter() - start:.0f} s", flush=True)

    stage("float16", lambda name, pass_, nh, cands: cands)

    def top_of(name: str, pass_: str, nh: int, cands: dict) -> dict:
        default = default_key(defaults, name, nh, "float16", pass_)
        ranked = rank(records, name, pass_, nh, "float16")
        keys = [k for k in ranked[:top] if k in cands]
        keys += [k for k in cands if k == default and k not in keys]
        return {k: cands[k] for k in keys}

    stage("bfloat16", top_of)
    return records, defaults


def default_key(defaults: dict, op: str, nh: int, dtype: str, pass_: str | None = None) -> str:
    """The candidate key of what an untuned build of ``op`` uses for ``pass_`` (the pass's own
    params, else the op's, else the rule's default; float16's when ``dtype`` has none
    recorded)."""
    for d in (dtype, "float16"):
        tag = OpConfig(KEY_DIM, nh, d).tag
        found = (pass_ is not None and defaults.get(f"{tag}/{op}/{pass_}")) \
            or defaults.get(f"{tag}/{op}") or defaults.get(tag)
        if found:
            return params_key(found)
    return params_key({"tile_n": 0, "threads": 0, "row_threads": 0, "pad_bytes": 0})


def rank(records: list[dict], name: str, pass_: str, nh: int, dtype: str) -> list[str]:
    """Candidates of one (op, pass, nh, dtype) by their worst fraction over the shapes timed,
    then their mean (mismatching ones left out)."""
    per: dict = {}
    shapes = set()
    for r in records:
        if (r.get("op"), r.get("pass"), r.get("nh"), r.get("dtype")) == (name, pass_, nh, dtype) \
                and "cand" in r:
            shapes.add((r["dim"], r["batch"], r["size"]))
            if not r["mismatch"]:
                per.setdefault(r["cand"], []).append(r["fraction"])
    full = {k: v for k, v in per.items() if len(v) == len(shapes)}
    return sorted(full, key=lambda k: (-min(full[k]), -sum(full[k])))


def table(records: list[dict], defaults: dict) -> str:
    """Per (op, pass, dtype, nh): the default's fraction of copy per shape, the best single
    parameters (best worst case over the shapes) and theirs, and the best per shape."""
    rows = ["| op/pass | dtype nh | shapes (dim,B,HxW) | default | best params | best | "
            "best per shape |", "|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for r in records:
        if "cand" in r:
            groups.setdefault((r["op"], r["pass"], r["dtype"], r["nh"]), []).append(r)
    for (name, pass_, dtype, nh), recs in sorted(groups.items()):
        shapes = sorted({(r["dim"], r["batch"], r["size"]) for r in recs}, reverse=True)
        frac = {(r["cand"], (r["dim"], r["batch"], r["size"])): r["fraction"] for r in recs}
        default = default_key(defaults, name, nh, dtype, pass_)
        ranked = rank(records, name, pass_, nh, dtype)
        if not ranked:
            continue
        best = ranked[0]

        def fmt(key: str, frac: dict = frac, shapes: list = shapes) -> str:
            return " ".join(f"{frac.get((key, s), float('nan')):.2f}" for s in shapes)

        per_shape = []
        for s in shapes:
            ok = [r["fraction"] for r in recs
                  if (r["dim"], r["batch"], r["size"]) == s and not r["mismatch"]]
            per_shape.append(f"{max(ok):.2f}" if ok else "nan")
        bad = sum(r["mismatch"] for r in recs)
        shape_text = " ".join(f"{d},{b},{h}" for d, b, h in shapes)
        note = f" ({bad} MISMATCH)" if bad else ""
        rows.append(f"| {name}/{pass_} | {dtype} {nh} | {shape_text} | {fmt(default)} | "
                    f"{best} | {fmt(best)} | {' '.join(per_shape)}{note} |")
    return "\n".join(rows)


def _parse_shapes(text: str | None) -> tuple[tuple[int, int, int], ...]:
    """``--shapes``: ``"dim,B,HW;..."`` (H = W), or the default shapes."""
    from psa_tvm.tools.tune import parse_shapes

    return parse_shapes(text, (*SHAPES, *EXTRA_SHAPES),
                        "'DIM,B,HW;...' with positive sizes and DIM a multiple of 64 "
                        "(num_heads = DIM/64)", valid=lambda shape: shape[0] % 64 == 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m psa_tvm.tools.layout_tune",
                                     description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("-o", "--out", required=True)
    b.add_argument("--num-heads", type=int, nargs="+", default=[4, 6])
    b.add_argument("--dtypes", nargs="+", default=["float16"])
    b.add_argument("--ops", nargs="+", default=list(STREAM_OPS))
    b.add_argument("-j", "--jobs", type=int, default=1)
    b.add_argument("--grid", choices=list(GRIDS),
                   default="base",
                   help="base: the 56-set grid; cta: the small grid of CTA_GRID; wide: whole "
                        "heads per CTA (WIDE_TILES); follow-up: FOLLOW_UP; skew: the own params "
                        "with whole positions per kd-side access and group_pad_bytes; gather: "
                        "the gather's own params with the merge forward's tiles and threads; "
                        "divides: each pass's own params with 40/80-position tiles; stage: each "
                        "pass's own params with the register stage; stage-wide: the staged "
                        "gather with 32-128 tiles, 64-256 threads, 1/2/own row threads; "
                        "stage-divides: the staged gather with 40/80/200-position tiles; "
                        "stage-coalesced: the staged gather in the unstaged load order; the "
                        "last nine with each op's own params")
    t = sub.add_parser("time")
    t.add_argument("roots", nargs="+", help="artifact directories written by `build`")
    t.add_argument("--out", default="layout-tune")
    t.add_argument("--iters", type=int, default=10)
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--top", type=int, default=3, help="bfloat16: the float16 top N + default")
    t.add_argument("--budget-s", type=float, default=120.0)
    t.add_argument("--passes", nargs="+", choices=["forward", "backward"],
                   default=["forward", "backward"], help="the passes to time")
    t.add_argument("--shapes", default=None, metavar="DIM,B,HW;DIM,B,HW",
                   help="the shapes to time (default: issue 10's four, then num_heads 2 and 8)")
    t.add_argument("--flush", action="store_true",
                   help="time each candidate after an L2 flush (KernelProfiler medians) "
                        "against a copy of the bytes read + written")
    args = parser.parse_args(argv)
    if args.cmd == "build":
        build(Path(args.out), args.num_heads, args.dtypes, args.ops, args.jobs, args.grid)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records, defaults = time_candidates([Path(r) for r in args.roots], out, args.iters,
                                        args.rounds, args.top, args.budget_s, args.flush,
                                        tuple(args.passes), _parse_shapes(args.shapes))
    text = table(records, defaults)
    (out / "layout_tune.md").write_text(text + "\n")
    print(text)
    errors = [r for r in records if "error" in r or "skipped" in r]
    for r in errors[:10]:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
