"""Tune schedule parameters with a builder/runner split.

    psa-tvm tune build  -o .tune                  # any machine with TVM + nvcc: build candidates
    psa-tvm tune run    --artifacts .tune         # the GPU host (no TVM): time them, resumable
    psa-tvm tune select --artifacts .tune         # anywhere: best per (pass, dtype, kd, nh, arch)

``select -o PATH`` writes a table (``schedules/<arch>.json`` in a checkout ships it in the
wheel; a directory in ``$PSA_TVM_SCHEDULES`` overrides the shipped tables at run time).
Candidates are marked non-preferred in the manifest, so a tuning directory never changes what
an op picks unless the table names them.

``build --shifted`` tunes the shifted N-side kernels (``psa_tvm/compiler/shifted.py``) instead:
each candidate is the configuration's tuned tiled build with other ``ShiftedParams``, ``run``
times them where they run (odd ``N``, 2**21 elements and more; :data:`SHIFTED_TUNE_SHAPES`),
and ``select`` writes the best forward and backward fields per configuration into the table's
``"shifted"`` list. Every timing records whether a shifted kernel ran, so each selection
scores only the kernels it tunes, and each entry says which kernel ran on which shape.
``select --split-backward`` may make the shifted backward two candidates' kernels, one below a
call size and one from it on (``ShiftedParams.bwd_small_below``); ``select --whole-backward``
may add a third, a candidate's larger tile where ``N`` fits it and not the chosen one's
(``ShiftedParams.bwd_whole_tile_n``). ``select --n-range FIRST:LAST`` may give a tiled pass
a second tile for ``FIRST <= N <= LAST``: a candidate whose full-width kernel differs from the
chosen set's only in ``tile_n``/``threads`` (``TiledParams.range_*``).

Every timing also checks its result bit-exact against the reference (``"exact"``); ``select``
never picks a candidate that was inexact in any run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

from psa_tvm.config import DTYPE_ITEMSIZE, OpConfig
from psa_tvm.runtime.env import DEFAULT_ARCH
from psa_tvm.runtime.manifest import Manifest
from psa_tvm.runtime.tuned import SHIFTED_FLAGS

RESULTS = "results.jsonl"
#: How a record's ``copy_us`` was taken: a copy from the pass's inputs into its outputs. Records
#: without the field (before v23) copied between buffers of their own.
COPY_METHOD = "kernel-buffers"
OLD_COPY_METHOD = "own-buffers"
#: (B, H, W) timed per candidate: the 1280 px YOLO map at batch 16 and 64 (8 MB and more), where
#: the full-width kernels run, and two N tails (8 MB and more in 16-bit types), where the
#: narrower N-side variants run: N = 300 (640x480 input; 8-byte N side in 16-bit types) and the
#: odd N = 1073 (scalar N side). One parameter set serves every variant of a build, so the
#: selection weighs all four shapes; the table records which variant ran on which shape.
TUNE_SHAPES = ((16, 40, 40), (64, 40, 40), (64, 20, 15), (16, 37, 29))
GRID = {"tile_n": (32, 64, 128, 256), "threads": (64, 128, 256, 512), "row_threads": (1, 2, 4),
        "pad_bytes": (16, 32), "group_pad_bytes": (0,)}
STATIC_SMEM_LIMIT = 48 * 1024
#: Where the shifted kernels run and are timed: odd N (37x29; 25x25) at 8 MB and more in every
#: dtype, and, for the 16-bit backward that also runs at N % 8 == 0, the 1280x720 letterbox.
SHIFTED_TUNE_SHAPES = ((16, 37, 29), (64, 37, 29), (64, 25, 25), (64, 40, 23))
#: A shifted candidate replaces the defaults' fields of a pass only if its geometric mean beats
#: theirs by this much: the spread of equal kernels timed in one run is about +-0.5%.
SHIFTED_MIN_GAIN = 0.01
#: Each forward set is paired with a backward set (the passes are separate kernels, chosen
#: separately by ``select``); backward tiles are a power of two less one vector.
SHIFTED_GRID = {"forward": {"fwd_threads": (256, 512), "fwd_row_threads": (2, 4, 8),
                            "fwd_positions": (1, 2, 4), "grain": (2, 4)},
                "backward": {"bwd_tile_n": (64, 128, 256, 512), "bwd_threads": (128, 256, 512),
                             "bwd_row_threads": (2, 4, 8), "bwd_edge_first": (0,)}}


def candidates(config: OpConfig, grid: dict[str, tuple] | None = None) -> list:
    """Valid ``tiled`` parameter sets for ``config``: the grid, the rule's default and what the
    shipped table holds now (so a re-tune on new shapes can keep it)."""
    grid = GRID if grid is None else grid
    from psa_tvm.compiler.rules import get_rule

    rule = get_rule("tiled")
    found = _running_params(config)
    for values in itertools.product(*grid.values()):
        params = rule.Params(**dict(zip(grid, values, strict=True)))
        smem = config.key_dim * (params.tile_n * config.itemsize + params.pad_bytes) \
            + config.key_dim * params.group_pad_bytes  # at most a group pad per row
        try:
            rule.check_params(config, params)
        except ValueError:
            continue
        if smem <= STATIC_SMEM_LIMIT and params not in found:
            found.append(params)
    return found


def _grid_items(items: list[str] | None, names: Collection[str],
                what: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """``--grid NAME=V1,V2`` items as (name, text, ints); a name outside ``names`` (``what``
    says whose) or a value that is no int raises a ValueError."""
    for item in items or ():
        key, _, values = item.partition("=")
        if key not in names:
            raise ValueError(f"{what}: expected one of {sorted(names)}, got {key!r}")
        try:
            parsed = tuple(int(v) for v in values.split(","))
        except ValueError:
            raise ValueError(f"--grid: {key} expects comma-separated ints, got {values!r}") \
                from None
        yield key, values, parsed


def parse_shifted_grid(items: list[str] | None) -> dict[str, tuple]:
    """``--grid NAME=V1,V2`` for ``build --shifted``: axes of :data:`SHIFTED_GRID`, taken as
    given (a backward tile is the tile itself, e.g. ``bwd_tile_n=200,400`` for N = 400 * k)."""
    names = {k for axes in SHIFTED_GRID.values() for k in axes}
    return {key: parsed
            for key, _, parsed in _grid_items(items, names, "--grid with --shifted")}


def parse_grid(items: list[str] | None) -> dict[str, tuple]:
    """:data:`GRID` with ``--grid NAME=V1,V2`` overrides: any field of the tiled params, ints
    (a flag such as ``stage_loads`` takes 0/1). Unknown names and values raise a ValueError."""
    from dataclasses import fields

    from psa_tvm.compiler.rules.tiled import TiledParams

    defaults = {f.name: f.default for f in fields(TiledParams)}
    grid = dict(GRID)
    for key, values, parsed in _grid_items(items, defaults, "--grid"):
        if isinstance(defaults[key], bool):
            if set(parsed) - {0, 1}:
                raise ValueError(f"--grid: {key} is a flag, expected 0 or 1, got {values!r}")
            parsed = tuple(bool(v) for v in parsed)
        grid[key] = parsed
    return grid


def shifted_candidates(config: OpConfig, grid: dict[str, tuple] | None = None) -> list:
    """``ShiftedParams`` candidates for ``config``: every valid forward set of
    :data:`SHIFTED_GRID` (axes replaced by ``grid``, :func:`parse_shifted_grid`), each paired
    with a valid backward set (cycling the shorter list), the defaults and the shipped table's
    set first."""
    from dataclasses import replace

    from psa_tvm.compiler import shifted

    base = shifted.default_params(config)
    vec = shifted.vector_width(config)
    grid = grid or {}

    def valid(pass_: str) -> list[dict]:
        axes = {**SHIFTED_GRID[pass_], **{k: v for k, v in grid.items()
                                          if k in SHIFTED_GRID[pass_]}}
        sets = []
        for values in itertools.product(*axes.values()):
            fields = dict(zip(axes, values, strict=True))
            if pass_ == "backward" and "bwd_tile_n" not in grid:
                fields["bwd_tile_n"] -= vec  # the grid's powers of two, less the halo vector
            if shifted.fits(config, replace(base, **fields)) is None:
                sets.append(fields)
        return sets

    forward, backward = valid("forward"), valid("backward")
    found = [base]
    tuned = shifted.tuned_params(config, [DEFAULT_ARCH])
    if tuned is not None and tuned != base:
        found.append(tuned)
    for i in range(max(len(forward), len(backward))):
        params = replace(base, **forward[i % len(forward)], **backward[i % len(backward)])
        if params not in found and shifted.fits(config, params) is None:
            found.append(params)
    return found


def _running_params(config: OpConfig) -> list:
    """What ``config``'s tiled builds run now: the rule's default, then each pass's set in the
    shipped table where it differs (no duplicates)."""
    from psa_tvm.compiler.rules import get_rule
    from psa_tvm.runtime.tuned import tuned_entry

    rule = get_rule("tiled")
    found = [rule.default_params(config)]
    for pass_ in ("forward", "backward"):
        entry = tuned_entry(DEFAULT_ARCH, pass_, config)
        if entry is not None and entry["schedule"] == "tiled":
            params = rule.params_from_dict(entry["params"])
            if params not in found:
                found.append(params)
    return found


def stage_candidates(config: OpConfig) -> list:
    """The register stage (``TiledParams.stage_loads``) on what ``config`` runs now: each
    pass's tuned params (else the rule's default) without and with the stage, and with it at
    half and twice the threads (fewer threads: more loads in flight per thread), where valid."""
    from dataclasses import replace

    from psa_tvm.compiler.rules import get_rule

    rule = get_rule("tiled")
    found = []
    for own in _running_params(config):
        for params in (own, *(replace(own, stage_loads=True, threads=t)
                              for t in (own.threads, own.threads // 2, own.threads * 2))):
            try:
                rule.check_params(config, params)
            except ValueError:
                continue
            if params not in found:
                found.append(params)
    return found


def _tuned_tiled_params(config: OpConfig):
    """The tiled params of ``config``'s forward build in the shipped table (else the default):
    the plain kernels that shifted candidates carry along."""
    from psa_tvm.compiler.rules import get_rule
    from psa_tvm.runtime.tuned import tuned_entry

    rule = get_rule("tiled")
    entry = tuned_entry(DEFAULT_ARCH, "forward", config)
    if entry is not None and entry["schedule"] == "tiled":
        return rule.params_from_dict(entry["params"])
    return rule.default_params(config)


def cmd_build(args: argparse.Namespace) -> int:
    from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
    from psa_tvm.presets import PRESETS

    configs = [config for config in PRESETS[args.preset] if config.dtype in args.dtypes
               and (not args.configs or config.tag in args.configs)]
    if args.shifted:
        grid = parse_shifted_grid(args.grid)
        requests = [BuildRequest(config, "tiled", _tuned_tiled_params(config), preferred=False,
                                 shifted_params=params)
                    for config in configs for params in shifted_candidates(config, grid)]
        what = "shifted candidates"
    elif args.stage:
        requests = [BuildRequest(config, "tiled", params, preferred=False)
                    for config in configs for params in stage_candidates(config)]
        what = "register-stage candidates"
    else:
        grid = parse_grid(args.grid)
        requests = [BuildRequest(config, "tiled", params, preferred=False)
                    for config in configs for params in candidates(config, grid)]
        what = "candidates"
    # Candidates run through the RuntimeOp, one build at a time: no native library needed;
    # they are timed on the archs they are built for, so no PTX either.
    build_artifacts(requests, args.output, args.arch, jobs=args.jobs, progress=True,
                    keep_going=True, native=False, ptx=False)
    out = Path(args.output)
    sources = {b.source.resolve() for b in Manifest.load(out).builds}
    built = sum((out / f"{r.stem}.cu").resolve() in sources for r in requests)
    # keep_going leaves failed candidates out (TVM 0.27 cannot build some tile shapes)
    failed = f"; {len(requests) - built} failed to build (see above)" \
        if built < len(requests) else ""
    print(f"built {built} of {len(requests)} {what} into {args.output}{failed}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from psa_tvm.tools.timing import GpuTimer, KernelProfiler

    if args.placements < 1:
        raise ValueError(f"--placements: expected a count of 1 or more, got {args.placements}")
    root = Path(args.artifacts)
    results_path = root / RESULTS
    done = set()
    timer_name = "profiler" if args.profiler else "events"
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            r = json.loads(line)
            done.add((r["source"], r["pass"], tuple(r["shape"])))
            # `select` compares every line of the file: one timer and one copy per file
            if (found := r.get("timer", "events")) != timer_name:
                taken = {"events": "CUDA events", "profiler": "the profiler"}
                raise ValueError(f"--profiler: {results_path} holds timings taken with "
                                 f"{taken[found]}, this run takes them with {taken[timer_name]}"
                                 f"; time into another directory or move the file away")
            if r.get("copy", OLD_COPY_METHOD) != COPY_METHOD:
                raise ValueError(f"{results_path} holds timings against a copy between "
                                 f"buffers of its own (before v23); this run copies the "
                                 f"kernel's own buffers: time into another directory or move "
                                 f"the file away")
    manifest = Manifest.load(root)
    # The profiler's kernel times (CUPTI) leave out the host time that events after a flush
    # still see at small shapes; its runs are slower to take, so fewer by default.
    timer = (KernelProfiler(GpuTimer(reps=5), reps=args.reps) if args.profiler
             else GpuTimer(reps=args.reps))
    builds = [b for b in manifest.builds if b.schedule == "tiled" and b.op == "merge"
              and (not args.configs or b.config.tag in args.configs)]
    # Shifted candidates (`build --shifted`) are timed where they run.
    shapes = _parse_shapes(args.shapes, SHIFTED_TUNE_SHAPES if args.shifted else TUNE_SHAPES)
    jobs = [(b, p, s) for b in builds for p in args.passes for s in shapes
            if (str(b.source.relative_to(root)), p, s) not in done]
    with results_path.open("a") as sink:
        for build, pass_, shape in tqdm(jobs, desc="psa-tvm tune", unit="run"):
            record = time_candidate(timer, build, pass_, shape, args.placements)
            record["source"] = str(build.source.relative_to(root))
            record["timer"] = timer_name
            sink.write(json.dumps(record) + "\n")
            sink.flush()
    print(f"timed {len(jobs)} runs ({len(done)} already done) into {results_path}")
    return 0


def _parse_shapes(text: str | None, default=TUNE_SHAPES,
                  option: str = "--shapes") -> tuple[tuple[int, int, int], ...]:
    return parse_shapes(text, default, "'B,H,W;B,H,W' with positive sizes", option=option)


def parse_shapes(text: str | None, default: tuple, expected: str,
                 valid=lambda shape: True,
                 option: str = "--shapes") -> tuple[tuple[int, int, int], ...]:
    """A shapes option (``option``): ``"a,b,c;a,b,c"`` of positive ints that pass ``valid``,
    or ``default`` when empty; anything else raises a ValueError naming the option and the
    ``expected`` form."""
    if not text:
        return default
    try:
        shapes = tuple(tuple(int(x) for x in part.split(",")) for part in text.split(";"))
    except ValueError:
        shapes = ()
    if not shapes or any(len(s) != 3 or min(s) < 1 or not valid(s) for s in shapes):
        raise ValueError(f"{option}: expected {expected}, got {text!r}")
    return shapes


def time_candidate(timer, build, pass_: str, shape: tuple[int, int, int],
                   placements: int = 1) -> dict:
    """One candidate on one shape, with a copy of the same bytes: from the pass's inputs into
    its outputs, timed just before the kernel (a copy between other buffers can take 5% more
    or less at L2-sized calls; docs/perf.md v23). With ``placements`` > 1 both are timed on that
    many sets of tensors at other addresses (all alive at once); the record holds the medians."""
    import torch

    from psa_tvm import reference
    from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
    from psa_tvm.tools.timing import merge_halves

    config = build.config
    batch, height, width = shape
    dtype = getattr(torch, config.dtype)
    op = PsaMergeAttnRuntimeOp.for_build(build)
    stream = torch.cuda.current_stream().cuda_stream
    sets = []
    for _ in range(placements):
        halves = merge_halves(batch * config.num_heads, height * width, config.key_dim, dtype)
        merged = torch.randn(batch, config.channels, height, width, device="cuda",
                             dtype=dtype)  # the backward's input
        sets.append((halves, merged))
    copy_times, times = zip(*(_time_copy_and_kernel(timer, op, pass_, halves, merged,
                                                    (height, width), stream)
                              for halves, merged in sets), strict=True)
    # A candidate is timed on what it computes (select skips any that was ever inexact): one
    # more launch into poisoned outputs, so that memory left by an earlier candidate at the
    # same shape cannot pass for this one's result.
    halves, merged = sets[0]
    lo, hi = halves[0], halves[1]
    if pass_ == "forward":
        kernel = op.plan_forward([lo, hi], merged, (height, width)).kernel
        merged.fill_(float("nan"))
        op.launch_forward(lo, hi, merged, stream, (height, width))
        exact = reference.same_bits(merged, reference.merge(lo, hi, config.num_heads, height,
                                                             width))
    else:
        kernel = op.plan_backward(merged, [lo, hi]).kernel
        halves.fill_(float("nan"))
        op.launch_backward(merged, lo, hi, stream)
        ref_lo, ref_hi = reference.merge_backward(merged, config.num_heads, config.key_dim)
        exact = reference.same_bits(lo, ref_lo) and reference.same_bits(hi, ref_hi)
    return {"pass": pass_, "shape": list(shape), "us": round(statistics.median(times), 3),
            "copy_us": round(statistics.median(copy_times), 3), "copy": COPY_METHOD,
            "placements": placements, "variant": [kernel.vec_kd, kernel.vec],
            "shifted": kernel.shifted, "kernel": kernel.entry, "exact": exact}


def _time_copy_and_kernel(timer, op, pass_: str, halves, merged, spatial: tuple[int, int],
                          stream: int) -> tuple[float, float]:
    """The copy from the pass's inputs into its outputs, then the kernel, on one set of
    tensors (``halves`` holds ``lo`` and ``hi``)."""
    from psa_tvm.tools.timing import flat_copy

    lo, hi = halves[0], halves[1]
    if pass_ == "forward":
        return (timer.median_us(flat_copy(halves, merged)),
                timer.median_us(lambda: op.launch_forward(lo, hi, merged, stream, spatial)))
    return (timer.median_us(flat_copy(merged, halves)),
            timer.median_us(lambda: op.launch_backward(merged, lo, hi, stream)))


def _scores(root: Path, by_source: dict, shifted: bool, shapes: tuple,
            results: list[Path] | None = None) -> dict:
    """(pass, dtype, kd, nh) -> source -> shape -> (fraction of copy, variant that ran), from
    the timings where a shifted kernel ran (``shifted``) or a plain one did; with several
    ``results`` files (runs of the same candidates), the fraction is their mean."""
    fractions: dict[tuple, dict[str, dict[tuple, list]]] = {}
    variants: dict[tuple, object] = {}
    records = [json.loads(line) for path in results or [root / RESULTS]
               for line in path.read_text().splitlines()]
    # A candidate that computed a wrong result anywhere is never chosen (older records,
    # without "exact", predate the check).
    inexact = {r["source"] for r in records if r.get("exact") is False}
    for source in sorted(inexact):
        print(f"tune select: {source} was inexact in a timing run; left out", file=sys.stderr)
    for r in records:
        build = by_source.get(r["source"])
        if build is None or r["source"] in inexact or tuple(r["shape"]) not in shapes or \
                r.get("shifted", False) != shifted:
            continue
        c = build.config
        key = (r["pass"], c.dtype, c.key_dim, c.num_heads)
        shape = tuple(r["shape"])
        fractions.setdefault(key, {}).setdefault(r["source"], {}).setdefault(
            shape, []).append(r["copy_us"] / r["us"])
        variants[key, r["source"], shape] = ([*r["variant"], "s"] if shifted
                                             else r.get("variant"))
    return {key: {source: {shape: (sum(f) / len(f), variants[key, source, shape])
                           for shape, f in per_shape.items()}
                  for source, per_shape in per_source.items()}
            for key, per_source in fractions.items()}


def _best(per_source: dict, order: tuple, among: Collection[str] | None = None,
          objective: str = "geomean") -> tuple[str, float, list[dict], int] | None:
    """The source with the best score over the shapes every candidate was timed on: (source,
    that score, its per-shape record, candidates compared), or None if fewer than two
    candidates were; ``among``: the best of these sources only (on the same shapes). The score
    is the geometric mean of the fractions of copy (``objective="geomean"``) or the worst one
    (``"worst"``: the issue's targets hold per shape, so a set that is slow on one shape loses
    to one a little slower on average)."""
    shapes = set.intersection(*(set(v) for v in per_source.values()))
    complete = {s: v for s, v in per_source.items() if set(v) >= shapes}
    if len(complete) < 2 or not shapes:
        return None  # nothing was compared: leave the configuration to the defaults
    ordered = [s for s in order if s in shapes]
    if not ordered:
        return None
    scores = {src: _score([v[s][0] for s in ordered], objective)
              for src, v in complete.items() if among is None or src in among}
    if not scores:
        return None
    best = max(scores, key=scores.__getitem__)
    tuned_on = [{"shape": list(s), "variant": complete[best][s][1],
                 "fraction_of_copy": round(complete[best][s][0], 4)} for s in ordered]
    return best, scores[best], tuned_on, len(complete)


def _score(fractions: list[float], objective: str) -> float:
    """A candidate's score from its fractions of copy (higher is better)."""
    if objective == "worst":
        return min(fractions)
    return math.prod(fractions) ** (1 / len(fractions))


def _best_beating(per_source: dict, order: tuple, baseline: Collection[str],
                  min_gain: float, objective: str = "geomean"
                  ) -> tuple[str, float, list[dict], int] | None:
    """:func:`_best`, unless it beats the best of the ``baseline`` sources (the table's or the
    defaults' params) by less than ``min_gain``: then that one, within the runs' noise."""
    found = _best(per_source, order, objective=objective)
    if found is None or not baseline or not min_gain:
        return found
    kept = _best(per_source, order, among=baseline, objective=objective)
    if kept is not None and found[1] < kept[1] * (1 + min_gain):
        return (*kept[:3], found[3])
    return found


def moved_mb(shape: tuple[int, int, int], dtype: str, key_dim: int, num_heads: int) -> float:
    """Megabytes one pass moves at ``shape`` ``(B, H, W)``: the merged tensor read and
    written once (the benchmark's and the issue's size)."""
    return 2 * OpConfig(key_dim, num_heads, dtype).merged_bytes(*shape) / 1e6


def _choose(per_source: dict, config: tuple[str, int, int], shapes: tuple,
            baseline: Collection[str], min_gain: float, objective: str,
            min_mb: float) -> tuple[str, float, list[dict], int] | None:
    """One configuration's pick, tiled or shifted: :func:`_best_beating` over the ``shapes``
    at which ``config`` ``(dtype, key_dim, num_heads)`` moves ``min_mb`` MB or more (``--min-mb``),
    with the geometric mean of the pick's fractions whatever ``objective`` decided (the table's
    ``fraction_of_copy``; the worst shape is in its per-shape record)."""
    big = tuple(s for s in shapes if moved_mb(s, *config) >= min_mb)
    if (found := _best_beating(per_source, big, baseline, min_gain, objective)) is None:
        return None
    best, _, tuned_on, compared = found
    return best, _score([t["fraction_of_copy"] for t in tuned_on], "geomean"), tuned_on, compared


def cmd_select(args: argparse.Namespace) -> int:
    shapes = _parse_shapes(args.shapes)  # the options first: a bad one reads nothing
    shifted_shapes = _parse_shapes(args.shifted_shapes, SHIFTED_TUNE_SHAPES, "--shifted-shapes")
    n_range = parse_n_range(args.n_range)
    root = Path(args.artifacts)
    manifest = Manifest.load(root)
    by_source = {str(b.source.relative_to(root)): b for b in manifest.builds if b.op == "merge"}
    results = [Path(r) for r in args.results] if args.results else None
    out = Path(args.output)
    previous = json.loads(out.read_text()) if out.exists() else {}
    tabled = {_entry_key(e): e["params"] for e in previous.get("entries", [])}
    entries = []
    for (pass_, dtype, key_dim, num_heads), per_source in sorted(
            _scores(root, by_source, False, shapes, results).items()):
        if len({json.dumps(by_source[s].schedule_params, sort_keys=True)
                for s in per_source}) < 2:
            continue  # one set of tiled params (a `build --shifted` run): nothing was compared
        current = tabled.get((pass_, dtype, key_dim, num_heads))
        tabled_sources = {s for s in per_source if by_source[s].schedule_params == current}
        if (found := _choose(per_source, (dtype, key_dim, num_heads), shapes, tabled_sources,
                             args.min_gain, args.objective, args.min_mb)) is None:
            continue
        best, fraction, tuned_on, compared = found
        params = by_source[best].schedule_params
        if n_range is not None and (ranged := _range_kernel(
                per_source, {s: by_source[s].schedule_params for s in per_source}, best,
                tuned_on, n_range, args.objective)) is not None:
            params, fraction, tuned_on = ranged
        entries.append({"pass": pass_, "dtype": dtype, "key_dim": key_dim,
                        "num_heads": num_heads, "schedule": by_source[best].schedule,
                        "params": params,
                        "fraction_of_copy": round(fraction, 4), "candidates": compared,
                        **({"objective": args.objective} if args.objective != "geomean"
                           else {}),
                        "tuned_on": tuned_on})
    shifted_entries = _select_shifted(root, by_source, results, shifted_shapes, args.objective,
                                      args.min_mb, args.split_backward, args.arch,
                                      args.whole_backward)
    previous = previous if args.update else {}
    # --update keeps what earlier runs tuned for other configurations (and passes).
    fresh = {_entry_key(e) for e in entries}
    entries = sorted([e for e in previous.get("entries", []) if _entry_key(e) not in fresh]
                     + entries, key=_entry_key)
    before = {_shifted_key(e): e for e in previous.get("shifted", [])}
    for entry in shifted_entries:
        _keep_untimed_passes(entry, before.get(_shifted_key(entry), {}))
    # The shapes the shifted entries were selected on: this run's where it selected any, else
    # the kept table's (a tiled-only run must not relabel them with the defaults).
    shifted_on = ([list(s) for s in shifted_shapes] if shifted_entries
                  else previous.get("shifted_tune_shapes", [list(s) for s in shifted_shapes]))
    fresh = {_shifted_key(e) for e in shifted_entries}
    shifted_entries = sorted([e for e in previous.get("shifted", [])
                              if _shifted_key(e) not in fresh] + shifted_entries,
                             key=_shifted_key)
    table = {"arch": args.arch, "generated_by": "scripts/tune.py select",
             "tune_shapes": [list(s) for s in TUNE_SHAPES], "entries": entries}
    if shifted_entries:
        table["shifted_tune_shapes"] = shifted_on
        table["shifted"] = shifted_entries
    out.write_text(json.dumps(table, indent=1) + "\n")
    for e in entries:
        print(f"{e['pass']:8s} {e['dtype']:8s} kd={e['key_dim']} nh={e['num_heads']}: "
              f"{e['fraction_of_copy']:.3f} of copy with {e['params']}")
    for e in shifted_entries:
        print(f"shifted  {e['dtype']:8s} kd={e['key_dim']} nh={e['num_heads']}: "
              f"{e['fraction_of_copy']} of copy with {e['params']}")
    print(f"wrote {out}")
    return 0


def _select_shifted(root: Path, by_source: dict, results: list[Path] | None = None,
                    shapes: tuple = SHIFTED_TUNE_SHAPES, objective: str = "geomean",
                    min_mb: float = 0.0, split_backward: bool = False,
                    arch: str = DEFAULT_ARCH, whole_backward: bool = False) -> list[dict]:
    """Per configuration, the shifted params whose forward (backward) kernel was fastest where
    a shifted kernel ran, among candidates that differ in them (``build --shifted``), scored
    over ``shapes`` by ``objective`` (shapes under ``min_mb`` moved left out, as for the tiled
    params). The 16-bit backward also runs at ``N % 8 == 0`` above 2**21 elements, so the YOLO
    squares belong in ``shapes`` for it. With ``split_backward`` the backward may instead be a
    pair, one candidate's kernel below a call size and another's from it on
    (:func:`_split_backward`); with ``whole_backward`` it may also get a whole-row kernel by
    ``N`` (:func:`_whole_backward`)."""
    from psa_tvm.compiler.rules.base import params_as_dict
    from psa_tvm.compiler.shifted import (
        PASS_FIELDS,
        ShiftedParams,
        as_record,
        default_params,
        fits,
        tuned_params,
    )

    chosen: dict[tuple, dict] = {}
    for (pass_, dtype, key_dim, num_heads), per_source in sorted(
            _scores(root, by_source, True, shapes, results).items()):
        # Builds from before manifests recorded their shifted params cannot be told apart.
        per_source = {s: v for s, v in per_source.items()
                      if by_source[s].shifted_params is not None}
        if len({json.dumps(by_source[s].shifted_params, sort_keys=True)
                for s in per_source}) < 2:
            continue  # one set of shifted params (a tiled tuning run): nothing was compared
        default = params_as_dict(default_params(OpConfig(key_dim, num_heads, dtype)))

        def fields_of(source: str, default: dict = default) -> dict:
            # records leave out fields at their defaults (no split) and flags that are 0, and
            # older manifests predate them: the defaults and 0 fill them in
            return {**default, **dict.fromkeys(SHIFTED_FLAGS, 0),
                    **by_source[source].shifted_params}

        defaults = {s for s in per_source if all(
            fields_of(s)[k] == default[k] for k in PASS_FIELDS[pass_])}
        if (found := _choose(per_source, (dtype, key_dim, num_heads), shapes, defaults,
                             SHIFTED_MIN_GAIN, objective, min_mb)) is None:
            continue
        best, fraction, tuned_on, compared = found
        entry = chosen.setdefault((dtype, key_dim, num_heads), {
            "dtype": dtype, "key_dim": key_dim, "num_heads": num_heads, "params": {},
            "fraction_of_copy": {}, "candidates": {},
            **({"objective": objective} if objective != "geomean" else {}), "tuned_on": {}})
        fields = {k: fields_of(best)[k] for k in PASS_FIELDS[pass_]}
        if split_backward and pass_ == "backward" and (split := _split_backward(
                per_source, fields_of, (dtype, key_dim, num_heads), shapes, objective,
                min_mb, best)) is not None:
            fields, fraction, tuned_on = split
        if whole_backward and pass_ == "backward" and (whole := _whole_backward(
                per_source, fields_of, fields, tuned_on, objective)) is not None:
            fields, fraction, tuned_on = whole
        entry["params"].update(fields)
        entry["fraction_of_copy"][pass_] = round(fraction, 4)
        entry["candidates"][pass_] = compared
        entry["tuned_on"][pass_] = tuned_on
    entries = []
    for (dtype, key_dim, num_heads), entry in chosen.items():
        # A pass without timings keeps what builds take now: the table's fields, or the
        # defaults'.
        config = OpConfig(key_dim, num_heads, dtype)
        base = tuned_params(config, [arch]) or default_params(config)
        params = ShiftedParams(**{**params_as_dict(base), **entry["params"]})
        if (why := fits(config, params)) is not None:
            # The two passes' winners, each valid with the other pass's fields of its own
            # build, need not fit together (shared memory): keep what builds take now.
            print(f"shifted {config.tag}: the chosen passes do not fit together ({why}); "
                  f"kept {base}")
            params = base
            entry["kept_defaults"] = why  # the fractions above are the winners', not these
        entry["params"] = as_record(params)  # as the builds' manifests record them
        entries.append(entry)
    return entries


def _split_backward(per_source: dict, fields_of, config: tuple[str, int, int], shapes: tuple,
                    objective: str, min_mb: float, single: str
                    ) -> tuple[dict, float, list[dict]] | None:
    """The best split of the shifted backward: candidate ``a``'s kernel for calls below a size,
    candidate ``b``'s from it on, over every pair of unsplit candidates and every cut between
    two of the ``shapes`` (by merged elements; the size is their geometric mean). Each kernel's
    timings are its own candidate's at those shapes (the split build runs the same two kernels
    there). ``None`` unless the pair beats the ``single`` pick by :data:`SHIFTED_MIN_GAIN` on
    ``objective``, or is as good there and beats it by as much on the geometric mean (a worst
    shape both share, say the smallest, must not hide what the split gains on the others);
    else (backward fields, geometric mean, per-shape record with the kernel that runs each
    shape)."""
    from psa_tvm.compiler.shifted import PASS_FIELDS, ShiftedParams, fits, split_backward

    dtype, key_dim, num_heads = config
    op = OpConfig(key_dim, num_heads, dtype)
    numel = {s: op.merged_bytes(*s) // op.itemsize
             for s in shapes if moved_mb(s, *config) >= min_mb}
    ordered = sorted((s for s in numel if all(s in v for v in per_source.values())),
                     key=numel.__getitem__)
    unsplit = [s for s in per_source if _one_backward(fields_of(s))]
    if len(ordered) < 2 or len(unsplit) < 2 or single not in per_source:
        return None
    single_fractions = [per_source[single][s][0] for s in ordered]
    single_score = (_score(single_fractions, objective), _score(single_fractions, "geomean"))
    best = None
    for cut in range(1, len(ordered)):
        lower, upper = numel[ordered[cut - 1]], numel[ordered[cut]]
        if lower == upper:
            continue  # one size on both sides: no cut by size separates them
        for a, b in itertools.permutations(unsplit, 2):
            fractions = ([per_source[a][s][0] for s in ordered[:cut]]
                         + [per_source[b][s][0] for s in ordered[cut:]])
            score = (_score(fractions, objective), _score(fractions, "geomean"))
            if best is None or score > best[0]:
                best = (score, cut, max(lower + 1, math.isqrt(lower * upper)), a, b)
    if best is None or not _gains(best[0], single_score):
        return None
    (_, fraction), cut, below, a, b = best
    params = split_backward(ShiftedParams(**fields_of(b)), ShiftedParams(**fields_of(a)), below)
    if fits(op, params) is not None:
        return None
    fields = {k: getattr(params, k) for k in PASS_FIELDS["backward"]}
    tuned_on = [{"shape": list(s), "variant": per_source[src][s][1], "kernel": kernel,
                 "fraction_of_copy": round(per_source[src][s][0], 4)}
                for i, s in enumerate(ordered)
                for src, kernel in [(a, "small") if i < cut else (b, "main")]]
    return fields, round(fraction, 4), tuned_on


def _keep_untimed_passes(entry: dict, earlier: dict) -> None:
    """A pass this run did not time keeps ``earlier``'s record in ``entry``; where the passes
    were then chosen by different objectives, ``entry["objective"]`` names each pass's."""
    kept = [p for p in earlier.get("tuned_on", {}) if p not in entry["tuned_on"]]
    for record in ("fraction_of_copy", "candidates", "tuned_on"):
        entry[record] = dict(sorted({**{p: earlier[record][p] for p in kept
                                        if p in earlier.get(record, {})},
                                     **entry[record]}.items()))
    objectives = {p: (earlier if p in kept else entry).get("objective", "geomean")
                  for p in entry["tuned_on"]}
    if len(set(objectives.values())) > 1:
        entry["objective"] = dict(sorted(objectives.items()))


def _one_backward(fields: dict) -> bool:
    """Whether a candidate's fields give it one shifted backward (no split, no whole-row
    kernel): its timings are then that kernel's wherever a shifted backward ran."""
    return not fields["bwd_small_below"] and not fields["bwd_whole_tile_n"]


def _gains(score: tuple[float, float], single: tuple[float, float]) -> bool:
    """Whether a split, whole-row or range ``score`` (objective, geometric mean) is worth its extra
    kernel over ``single``'s: :data:`SHIFTED_MIN_GAIN` on the objective, or as good there and
    that much on the geometric mean (a worst shape both share must not hide what it gains on
    the others)."""
    return score[0] >= single[0] * (1 + SHIFTED_MIN_GAIN) or (
        score[0] >= single[0] and score[1] >= single[1] * (1 + SHIFTED_MIN_GAIN))


def _whole_backward(per_source: dict, fields_of, fields: dict, tuned_on: list[dict],
                    objective: str) -> tuple[dict, float, list[dict]] | None:
    """The best whole-row backward for the chosen backward ``fields`` (with their per-shape
    record ``tuned_on``): candidate ``c``'s kernel at the shapes whose ``N`` fits ``c``'s tile
    and not the chosen one's, over every candidate with one backward and a larger tile. Its
    timings there are ``c``'s own (the build runs the same kernel there), the other shapes
    keep ``tuned_on``'s. ``None`` unless that beats ``tuned_on`` as :func:`_gains` says; else
    (backward fields, geometric mean, per-shape record, the whole-row shapes marked)."""
    from dataclasses import replace

    from psa_tvm.compiler.shifted import ShiftedParams, whole_backward_rows, with_whole_backward

    current = [tuple(t["shape"]) for t in tuned_on]
    chosen = replace(ShiftedParams(), **fields)  # only its backward fields are read
    rows_of = {}
    for source, timings in per_source.items():
        candidate = ShiftedParams(**fields_of(source))
        if not _one_backward(fields_of(source)) or candidate.bwd_tile_n <= chosen.bwd_tile_n:
            continue
        first, last = whole_backward_rows(with_whole_backward(chosen, candidate))
        rows_of[source] = {s for s in current if first <= s[1] * s[2] <= last and s in timings}
    if (found := _best_extra_kernel(per_source, tuned_on, rows_of, objective, "whole")) is None:
        return None
    source, fraction, record = found
    params = with_whole_backward(chosen, ShiftedParams(**fields_of(source)))
    return ({k: getattr(params, k) for k in fields}, fraction, record)


def _best_extra_kernel(per_source: dict, tuned_on: list[dict], rows_of: dict[str, set],
                       objective: str, kernel: str) -> tuple[str, float, list[dict]] | None:
    """Of the candidates in ``rows_of`` (source -> the shapes where its kernel would run as the
    extra one), the one whose timings there, with ``tuned_on``'s elsewhere, score best; None
    unless that beats ``tuned_on`` as :func:`_gains` says. Else (source, geometric mean,
    per-shape record with its shapes marked ``kernel``)."""
    current = {tuple(t["shape"]): t for t in tuned_on}
    single = [t["fraction_of_copy"] for t in tuned_on]
    single_score = (_score(single, objective), _score(single, "geomean"))
    best = None
    for source, rows in rows_of.items():
        if not rows:
            continue
        fractions = [per_source[source][s][0] if s in rows else current[s]["fraction_of_copy"]
                     for s in current]
        score = (_score(fractions, objective), _score(fractions, "geomean"))
        if best is None or score > best[0]:
            best = (score, source, rows)
    if best is None or not _gains(best[0], single_score):
        return None
    (_, fraction), source, rows = best
    record = [{**t, "kernel": kernel, "variant": per_source[source][s][1],
               "fraction_of_copy": round(per_source[source][s][0], 4)} if s in rows else t
              for s, t in current.items()]
    return source, round(fraction, 4), record


#: What a range kernel may differ in from the chosen set's full-width kernel: its own tile
#: (``TiledParams.range_*``), and the fields only the narrower kernels read.
_NOT_IN_FULL_WIDTH = ("tile_n", "threads", "narrow_tile_n", "narrow_threads")


def _full_width_rest(params: dict) -> dict:
    """Stored tiled params without :data:`_NOT_IN_FULL_WIDTH`: equal for two sets whose
    full-width kernels differ at most in their tile."""
    return {k: v for k, v in params.items() if k not in _NOT_IN_FULL_WIDTH}


def parse_n_range(text: str | None) -> tuple[int, int] | None:
    """``--n-range FIRST:LAST`` -> ``(FIRST, LAST)``, ``1 <= FIRST <= LAST``."""
    if text is None:
        return None
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        raise SystemExit(f"--n-range: expected FIRST:LAST (two integers), got {text!r}") from None
    if not 1 <= first <= last:
        raise SystemExit(f"--n-range: expected 1 <= FIRST <= LAST, got {text!r}")
    return first, last


def _range_kernel(per_source: dict, params_of: dict[str, dict], chosen: str,
                  tuned_on: list[dict], n_range: tuple[int, int], objective: str
                  ) -> tuple[dict, float, list[dict]] | None:
    """The chosen tiled set with a range kernel for ``FIRST <= N <= LAST`` (``n_range``):
    candidate ``c``'s tile and threads, over the candidates whose full-width kernel differs from
    ``chosen``'s in nothing else (their ``narrow_*`` fields, which only the narrower kernels
    read, may differ). At the shapes whose ``N`` is in the range and where both ran the full-width
    kernel (the one a range kernel replaces) ``c``'s timings stand, elsewhere ``tuned_on``'s.
    ``None`` unless that beats ``tuned_on`` as :func:`_gains` says; else (params, geometric
    mean, per-shape record with the range shapes marked)."""
    base = params_of[chosen]
    # Stored params name the range fields only where set: the chosen set has a range kernel
    # already (a table's entry), and a candidate with one never matches ``rest`` below.
    if any(k.startswith("range_") for k in base):
        return None
    rest = _full_width_rest(base)
    full = max(t["variant"][0] for t in tuned_on)
    first, last = n_range
    # the shapes in the range where the chosen set ran its full-width kernel
    in_range = {tuple(t["shape"]) for t in tuned_on
                if first <= t["shape"][1] * t["shape"][2] <= last
                and list(t["variant"]) == [full, full]}
    rows_of = {}
    for source, timings in sorted(per_source.items()):
        if source == chosen or _full_width_rest(params_of[source]) != rest:
            continue
        rows_of[source] = {s for s in in_range
                           if s in timings and list(timings[s][1]) == [full, full]}
    if (found := _best_extra_kernel(per_source, tuned_on, rows_of, objective, "range")) is None:
        return None
    source, fraction, record = found
    params = {**base, "range_min_n": first, "range_max_n": last,
              "range_tile_n": params_of[source]["tile_n"],
              "range_threads": params_of[source]["threads"]}
    return params, fraction, record


def _entry_key(entry: dict) -> tuple:
    return (entry["pass"], entry["dtype"], entry["key_dim"], entry["num_heads"])


def _shifted_key(entry: dict) -> tuple:
    return (entry["dtype"], entry["key_dim"], entry["num_heads"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``psa-tvm tune`` (and of ``scripts/tune.py``)."""
    sub = parser.add_subparsers(dest="step", required=True)
    build = sub.add_parser("build", help="build candidate schedules (needs TVM + nvcc)")
    build.add_argument("--preset", default="yolo11")
    build.add_argument("--arch", nargs="+", default=[DEFAULT_ARCH])
    build.add_argument("--dtypes", nargs="+", default=list(DTYPE_ITEMSIZE))
    build.add_argument("--configs", nargs="+", default=None, metavar="TAG",
                       help="only these configurations of the preset, e.g. kd32_nh4_float16")
    build.add_argument("--grid", nargs="+", metavar="NAME=V1,V2",
                       help=f"override grid axes (default {GRID}), or add any tiled param "
                            "(flags 0/1, e.g. stage_loads=1); with --shifted, axes of "
                            f"{SHIFTED_GRID} (backward tiles as given)")
    build.add_argument("--shifted", action="store_true",
                       help="candidates of the shifted N-side kernels' params (each the "
                            "configuration's tuned tiled build) instead of tiled params")
    build.add_argument("--stage", action="store_true",
                       help="candidates of the tiled rule's register stage (stage_loads) on "
                            "each pass's tuned params instead of the grid")
    build.add_argument("-o", "--output", default=".tune")
    build.add_argument("-j", "--jobs", type=int, default=None)
    build.set_defaults(func=cmd_build)
    run = sub.add_parser("run", help="time the candidates (GPU host; resumable)")
    run.add_argument("--artifacts", default=".tune")
    run.add_argument("--reps", type=int, default=30)
    run.add_argument("--placements", type=int, default=3,
                     help="time each candidate and its copy on this many sets of tensors at "
                          "other addresses, the medians recorded (default 3; docs/perf.md v23)")
    run.add_argument("--shapes", default=None, metavar="B,H,W;B,H,W",
                     help="time these shapes instead of the tuning shapes (for studies; "
                          "`select` only uses the tuning shapes)")
    run.add_argument("--configs", nargs="+", default=None, metavar="TAG",
                     help="only these configurations, e.g. kd32_nh4_float32")
    run.add_argument("--shifted", action="store_true",
                     help=f"time on the shifted kernels' shapes {SHIFTED_TUNE_SHAPES} "
                          "(a directory of `build --shifted`)")
    run.add_argument("--passes", nargs="+", choices=("forward", "backward"),
                     default=["forward", "backward"])
    run.add_argument("--profiler", action="store_true",
                     help="profiler kernel times (CUPTI) instead of events, L2 flushed either way")
    run.set_defaults(func=cmd_run)
    select = sub.add_parser("select", help="write a tuned table from the timings")
    select.add_argument("--artifacts", default=".tune")
    select.add_argument("--arch", default=DEFAULT_ARCH)
    select.add_argument("-o", "--output", required=True,
                        help="the table to write, e.g. schedules/sm_90.json in a checkout")
    select.add_argument("--update", action="store_true",
                        help="keep the output table's entries for configurations not timed here")
    select.add_argument("--shapes", default=None, metavar="B,H,W;B,H,W",
                        help=f"the shapes to select on (default {TUNE_SHAPES}); every candidate "
                             "must have been timed on each")
    select.add_argument("--results", nargs="+", default=None, metavar="JSONL",
                        help="timings to select from, e.g. two runs' (default: the artifact "
                             "directory's results.jsonl); a fraction of copy is their mean")
    select.add_argument("--min-gain", type=float, default=0.0,
                        help="keep the output table's params for a pass unless the best "
                             "candidate's geometric mean beats theirs by this fraction "
                             "(e.g. 0.01; they must be among the candidates)")
    select.add_argument("--objective", choices=("geomean", "worst"), default="geomean",
                        help="score a candidate by the geometric mean of its fractions of "
                             "copy over the shapes, or by its worst one (the per-shape "
                             "targets of docs/perf.md)")
    select.add_argument("--shifted-shapes", default=None, metavar="B,H,W;B,H,W",
                        help=f"the shapes to select the shifted params on (default "
                             f"{SHIFTED_TUNE_SHAPES}); the 16-bit shifted backward also runs "
                             "at the YOLO squares")
    select.add_argument("--min-mb", type=float, default=0.0,
                        help="per configuration, score only the shapes at which a pass moves "
                             "at least this many MB (the GPU target's 8)")
    select.add_argument("--whole-backward", action="store_true",
                        help="the shifted backward may add a candidate's larger tile where N "
                             "fits it and not the chosen one's (bwd_whole_* fields)")
    select.add_argument("--n-range", default=None, metavar="FIRST:LAST",
                        help="a tiled pass may add a candidate's tile_n/threads for FIRST <= N "
                             "<= LAST where that beats the chosen set (range_* fields; the "
                             "candidate's full-width kernel must differ from the set's in "
                             "nothing else)")
    select.add_argument("--split-backward", action="store_true",
                        help="let the shifted backward be two candidates' kernels, one below "
                             "a call size and one from it on, where that beats the best single "
                             "one by the objective (bwd_small_* fields)")
    select.set_defaults(func=cmd_select)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="psa-tvm tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
