"""Ahead-of-time build: schedule, lower, compile and describe kernels in an artifact directory.

Layout of an artifact directory::

    manifest.json                       every build below, see MANIFEST_FORMAT
    kd32_nh4_float16/tiled-1a2b3c4d.cu  the CUDA source TVM generated
    kd32_nh4_float16/tiled-1a2b3c4d.fatbin

One *build* is one (config, schedule, schedule parameters): a single source holding both passes
in every variant the launcher may pick (the access widths along kd and along N, from 16 bytes
down to scalar, and int32 or int64 indexing).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm

from psa_tvm._version import __version__
from psa_tvm.compiler import band, shifted
from psa_tvm.compiler.compute import merge_backward, merge_forward, stream_pass
from psa_tvm.compiler.cpu import build_cpu_library
from psa_tvm.compiler.cuda_fixups import pack_16bit_gathers
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.compiler.nvcc import check_archs, compile_source
from psa_tvm.compiler.rules import get_rule
from psa_tvm.compiler.rules.base import params_as_dict
from psa_tvm.config import OpConfig
from psa_tvm.layouts import stream_op
from psa_tvm.runtime.env import DEFAULT_ARCHS
from psa_tvm.runtime.manifest import MANIFEST_FORMAT, MANIFEST_NAME, kernel_symbol

_HERE = Path(__file__).parent
#: Digest of what defines a GPU build: every source of the compiler half (the TensorIR, the
#: schedule rules, the band and shifted kernels with their default params, lowering and the CUDA
#: fix-ups) and the op definitions it builds from. A build's stem names its config and schedule
#: params only, so a newer psa-tvm that changes a default kernel (``band.default_params``, v37)
#: writes it under the same name; the on-demand cache compares this digest instead
#: (:func:`psa_tvm.runtime.artifacts.find_build`), as it does the CPU libraries' (compiler/cpu.py).
DEFINITION_DIGEST = hashlib.sha1(b"".join(
    path.read_bytes()
    for path in (*sorted(_HERE.rglob("*.py")), *sorted(_HERE.glob("*.cc")),
                 *sorted((_HERE / "native_template").glob("*.h")),
                 _HERE.parent / "config.py", _HERE.parent / "layouts.py"))).hexdigest()[:12]

PASSES = {"forward": merge_forward, "backward": merge_backward}
INDEX_DTYPES = ("int32", "int64")
# A scattered shared-memory store of `vec` lanes needs an index vector of `vec` lanes; TVM's CUDA
# codegen has no C type for int64x8, so int64 kernels of 16-bit types use 8-byte vectors.
_INT64_MAX_LANES = 4


@dataclass(frozen=True)
class BuildRequest:
    """One build: a configuration scheduled by one rule with one set of parameters."""

    config: OpConfig
    schedule: str = "tiled"
    params: Any = None  # the rule's Params; None -> the rule's default for config
    preferred: bool = True  # False for tuning candidates: never picked by default
    op: str = "merge"  # or a member of the attention layout family (psa_tvm.layouts)
    # The shifted kernels' ShiftedParams (tiled merge builds); None -> shifted.default_params.
    shifted_params: shifted.ShiftedParams | None = None
    # ((pass, Params), ...): a pass scheduled with params of its own. Empty -> with ``params``
    # given, every pass uses them; without, a family op's per-pass sets (family_defaults).
    pass_params: tuple[tuple[str, Any], ...] = ()
    # The band kernels' BandParams (tiled merge builds); None -> band.default_params.
    band_params: tuple[band.BandParams, ...] | None = None

    def resolved_params(self) -> Any:
        if self.params is not None:
            return self.params
        if self.op != "merge" and self.schedule == "tiled":  # a family op's own defaults
            from psa_tvm.compiler.family_defaults import family_params

            if (params := family_params(self.op, self.config)) is not None:
                return params
        return get_rule(self.schedule).default_params(self.config)

    def resolved_pass_params(self) -> dict[str, Any]:
        """Each pass's params: :meth:`resolved_params` unless the pass has a set of its own."""
        overrides = dict(self.pass_params)
        if not overrides and self.params is None and self.op != "merge" \
                and self.schedule == "tiled":
            from psa_tvm.compiler.family_defaults import family_pass_params

            overrides = family_pass_params(self.op, self.config)
        passes = _pass_functions(self.op)
        if unknown := set(overrides) - set(passes):
            raise ValueError(f"pass_params: op {self.op!r} has passes {list(passes)}, got "
                             f"{sorted(unknown)}")
        base = self.resolved_params()
        return {pass_: overrides.get(pass_, base) for pass_ in passes}

    def own_pass_params(self) -> dict[str, dict[str, Any]]:
        """The passes whose params differ from :meth:`resolved_params`, as stored."""
        base = self.resolved_params()
        return {pass_: params_as_dict(params)
                for pass_, params in self.resolved_pass_params().items() if params != base}

    def resolved_shifted_params(self) -> shifted.ShiftedParams:
        if self.shifted_params is not None:
            return self.shifted_params
        return shifted.default_params(self.config)

    def resolved_band_params(self) -> tuple[band.BandParams, ...]:
        if self.band_params is not None:
            return self.band_params
        return band.default_params(self.config)

    @property
    def stem(self) -> str:
        described = params_as_dict(self.resolved_params())
        if self.shifted_params not in (None, shifted.default_params(self.config)):
            # Only non-default shifted params enter the digest: older stems stay as they were.
            described["shifted"] = shifted.as_record(self.shifted_params)
        if self.band_params not in (None, band.default_params(self.config)):  # likewise
            described["band"] = [band.as_record(p) for p in self.band_params]
        if own := self.own_pass_params():  # likewise: only builds with per-pass sets change
            described["passes"] = own
        blob = json.dumps(described, sort_keys=True)
        digest = hashlib.sha1(blob.encode()).hexdigest()[:8]
        prefix = "" if self.op == "merge" else f"{self.op}-"
        return f"{self.config.tag}/{prefix}{self.schedule}-{digest}"


@dataclass(frozen=True)
class Variant:
    """What one kernel of a build is specialised for."""

    pass_: str
    vec: int  # width on the side contiguous along N; the kernel needs N % vec == 0
    index_dtype: str
    vec_kd: int  # width on the side contiguous along kd (aligned whatever N is)
    shifted: bool = False  # 16-byte N-side vectors for any N (psa_tvm/compiler/shifted.py)
    band: band.BandParams | None = None  # a band kernel (psa_tvm/compiler/band.py)
    min_numel: int = 0  # runs only for calls of at least this many merged elements
    n_range: tuple[int, int] | None = None  # runs only for first <= N <= last (None: any N)


def _halvings(width: int) -> list[int]:
    """``width, width/2, ..., 1`` for a power of two."""
    return [width >> i for i in range(width.bit_length())]


def variant_widths(full: int, index_dtype: str) -> list[tuple[int, int]]:
    """The ``(vec_kd, vec)`` pairs built for a rule whose widest access is ``full`` elements.

    The kd side keeps its widest width for every N-side width down to scalar, so an ``N`` tail
    narrows only the side that needs it. For data aligned to less than 16 bytes, each narrower
    kd width comes with the same N width and with a scalar N side (misaligned views are rare;
    this keeps the count at 9 kernels per pass and index type for 16-bit types). int64 kernels
    cap the kd side at ``_INT64_MAX_LANES`` (its scattered shared accesses need an index vector
    of as many int64 lanes); their N side, a plain ramp, keeps every width.
    """
    kd_widest = full if index_dtype == "int32" else min(full, _INT64_MAX_LANES)
    pairs = [(kd_widest, vec) for vec in _halvings(full)]
    for width in _halvings(kd_widest)[1:]:
        pairs += [(width, width), (width, 1)]
    return list(dict.fromkeys(pairs))


def schedule_module(request: BuildRequest) -> dict[str, tuple[Variant, Any]]:
    """Every kernel variant of ``request``, scheduled, by global symbol."""
    rule = get_rule(request.schedule)
    by_pass = request.resolved_pass_params()
    widths = set()
    for params in by_pass.values():
        rule.check_params(request.config, params)
        widths.add(rule.vector_width(request.config, params))
    if len(widths) != 1:  # one set of variants per build: the passes must agree on the width
        raise ValueError(f"pass_params: every pass needs the same vector width, got "
                         f"{sorted(widths)} for {by_pass}")
    full_vec = widths.pop()
    funcs = {}
    for pass_, compute in _pass_functions(request.op).items():
        params = by_pass[pass_]
        for index_dtype in INDEX_DTYPES:
            for vec_kd, vec in variant_widths(full_vec, index_dtype):
                symbol = kernel_symbol(pass_, request.schedule, vec, index_dtype, vec_kd,
                                       op=request.op)
                func = compute(request.config, vec=vec, index_dtype=index_dtype, name=symbol)
                funcs[symbol] = (Variant(pass_, vec, index_dtype, vec_kd),
                                 rule.apply(func, pass_, request.config, params, vec, vec_kd))
        if (ranged := rule.range_kernel(params)) is not None:
            # One more full-width int32 kernel with a tile of its own, for N in its range; the
            # other widths and int64 keep the main params (docs/native.md, step 3).
            n_range, range_params = ranged
            symbol = kernel_symbol(pass_, request.schedule, full_vec, "int32", full_vec,
                                   op=request.op, n_range=n_range)
            func = compute(request.config, vec=full_vec, index_dtype="int32", name=symbol)
            funcs[symbol] = (Variant(pass_, full_vec, "int32", full_vec, n_range=n_range),
                             rule.apply(func, pass_, request.config, range_params, full_vec,
                                        full_vec))
    funcs.update(_shifted_variants(request, full_vec))
    funcs.update(_band_variants(request, full_vec))
    return funcs


def _band_variants(request: BuildRequest, full_vec: int) -> dict[str, tuple[Variant, Any]]:
    """The band kernels of a tiled merge build (int32, each for its pass, its range of ``N``
    and its call sizes), where the configuration fits them."""
    if request.op != "merge" or request.schedule != "tiled" \
            or full_vec != band.vector_width(request.config):
        return {}
    funcs = {}
    for params in request.resolved_band_params():
        if (why := band.fits(request.config, params)) is not None:
            raise ValueError(f"band_params {params} cannot build {request.config.tag}: {why}")
        n_range = (params.min_n, params.max_n)
        symbol = kernel_symbol(params.pass_, request.schedule, 1, "int32", full_vec,
                               op=request.op, band=params.rows, band_threads=params.threads,
                               n_range=n_range)
        if symbol in funcs:
            raise ValueError(f"band_params: two {params.pass_} kernels of {params.rows} rows "
                             f"at {params.threads} threads for N {n_range[0]}..{n_range[1]}")
        funcs[symbol] = (Variant(params.pass_, 1, "int32", full_vec, band=params,
                                 min_numel=params.min_numel, n_range=n_range),
                         band.band_pass(request.config, params, symbol))
    return funcs


def _shifted_variants(request: BuildRequest, full_vec: int) -> dict[str, tuple[Variant, Any]]:
    """The shifted N-side kernels of a tiled merge build (int32 only: past 2**31 elements the
    plain int64 kernels run), where the configuration fits them."""
    if request.op != "merge" or request.schedule != "tiled" \
            or full_vec != shifted.vector_width(request.config):
        return {}
    params = request.resolved_shifted_params()
    if (why := shifted.fits(request.config, params)) is not None:
        if request.shifted_params is not None:
            raise ValueError(f"shifted_params {params} cannot build {request.config.tag}: {why}")
        return {}
    funcs = {}
    small = shifted.small_backward(params)
    for pass_ in ("forward", "backward"):
        symbol = kernel_symbol(pass_, request.schedule, 1, "int32", full_vec, op=request.op,
                               shifted=True)
        # With a split backward the main one runs from bwd_small_below up, the small one below.
        min_numel = (params.bwd_small_below if small is not None and pass_ == "backward"
                     else shifted.MIN_NUMEL)
        funcs[symbol] = (Variant(pass_, 1, "int32", full_vec, shifted=True, min_numel=min_numel),
                         shifted.shifted_pass(request.config, pass_, params, symbol))
    # A split's small-call kernel (by size), a whole-row kernel (by N): from MIN_NUMEL up.
    extras = {"small": (small, None),
              "whole": (shifted.whole_backward(params), shifted.whole_backward_rows(params))}
    for extra, (kernel_params, n_range) in extras.items():
        if kernel_params is None:
            continue
        symbol = kernel_symbol("backward", request.schedule, 1, "int32", full_vec,
                               op=request.op, shifted=True, **{extra: True})
        funcs[symbol] = (Variant("backward", 1, "int32", full_vec, shifted=True,
                                 min_numel=shifted.MIN_NUMEL, n_range=n_range),
                         shifted.shifted_pass(request.config, "backward", kernel_params, symbol))
    return funcs


def _pass_functions(op: str) -> dict:
    """The op's PrimFunc builders by pass (the family's gather is its forward, like the
    merge's, so every rule schedules it with the same pass name)."""
    if op == "merge":
        return PASSES
    spec = stream_op(op)
    return {p: (lambda config, _p=p, **kw: stream_pass(config, spec, _p, **kw))
            for p in spec.passes}


def build_one(request: BuildRequest, out_dir: Path, archs: list[str],
              compiler: str = "auto", ptx: bool = True) -> dict:
    """Build ``request`` into ``out_dir``; return its manifest entry (``ptx``:
    :func:`~psa_tvm.compiler.nvcc.compile_source`'s)."""
    scheduled = schedule_module(request)
    lowered = lower_cuda({symbol: func for symbol, (_, func) in scheduled.items()}, arch=archs[-1])
    source = out_dir / f"{request.stem}.cu"
    source.parent.mkdir(parents=True, exist_ok=True)
    bands = _band_kernels(request, scheduled)
    source.write_text(band.patch_source(
        pack_16bit_gathers(lowered.source, request.config.dtype),
        {lowered.kernels[symbol]["entry"]: params for symbol, params in bands.items()}))
    compiled = compile_source(source, archs, compiler, ptx)
    rule = get_rule(request.schedule)
    params = request.resolved_params()
    kernels = []
    for symbol, contract in lowered.kernels.items():
        variant = scheduled[symbol][0]
        ranked = {"shifted": True, "rank": shifted.rank(request.config),
                  "min_numel": variant.min_numel} if variant.shifted else {}
        if variant.band is not None:
            ranked = {"band": variant.band.rows, "rank": band.rank(request.config),
                      "min_numel": variant.min_numel,
                      **({"max_numel": variant.band.max_numel} if variant.band.max_numel
                         else {})}
        if variant.n_range is not None:
            ranked["min_n"], ranked["max_n"] = variant.n_range
        kernels.append({"pass": variant.pass_, "vec": variant.vec, "vec_kd": variant.vec_kd,
                        "index_dtype": variant.index_dtype, **ranked, **contract,
                        "resources": compiled.resources.get(contract["entry"], {})})
        aligned = (shifted.aligned_rank(request.config, variant.pass_,
                                        request.resolved_shifted_params())
                   if variant.shifted else None)
        if aligned is not None:  # the same kernel, ahead of the plain one where N % vec == 0
            kernels.append({**kernels[-1], "vec": variant.vec_kd, "rank": aligned})
    folder = Path(request.stem).parent
    shifted_params = ({"shifted_params": shifted.as_record(request.resolved_shifted_params())}
                      if any(scheduled[symbol][0].shifted for symbol in lowered.kernels) else {})
    return {
        "key_dim": request.config.key_dim,
        "num_heads": request.config.num_heads,
        "dtype": request.config.dtype,
        "op": request.op,
        "schedule": request.schedule,
        "schedule_params": params_as_dict(params),
        **({"pass_params": own} if (own := request.own_pass_params()) else {}),
        "vector_width": rule.vector_width(request.config, params),
        "preferred": request.preferred,
        # what an untuned call of this configuration runs (Manifest.find): the newest such
        "default": request.params is None and not request.pass_params and request.preferred,
        "archs": archs,
        "compiler": compiled.compiler,
        "definition": DEFINITION_DIGEST,
        "source": f"{request.stem}.cu",
        "binaries": [{**b, "path": str(folder / b["path"])} for b in compiled.binaries],
        "kernels": kernels,
        **shifted_params,
        **({"band_params": [band.as_record(p) for p in bands.values()]} if bands else {}),
    }


def _band_kernels(request: BuildRequest,
                  scheduled: dict[str, tuple[Variant, Any]]) -> dict[str, band.BandParams]:
    """The build's band kernels by global symbol, with the params each was built with."""
    return {symbol: variant.band for symbol, (variant, _) in scheduled.items()
            if variant.band is not None}


def build_artifacts(requests: Iterable[BuildRequest], out_dir: str | os.PathLike,
                    archs: Iterable[str] = DEFAULT_ARCHS, *, jobs: int | None = None,
                    compiler: str = "auto", progress: bool = False,
                    keep_going: bool = False, cpu_configs: Iterable[OpConfig] = (),
                    native: bool = True, ptx: bool = True) -> Path:
    """Build every GPU request and every CPU configuration into ``out_dir`` (in parallel) and
    merge them into its manifest.

    With ``keep_going`` a request that fails to build is reported and left out (tuning
    candidates); otherwise the first failure is raised. With ``native`` (the default) the
    directory's native library is regenerated afterwards (:mod:`psa_tvm.compiler.native`).
    ``ptx=False`` builds device code for ``archs`` only, without the newest one's PTX (tuning
    candidates: :func:`~psa_tvm.compiler.nvcc.compile_source`).
    """
    arch_list = check_archs(list(archs))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    requests = list(dict.fromkeys(requests))
    cpu_configs = list(dict.fromkeys(cpu_configs))
    jobs = jobs or min(len(requests) + len(cpu_configs), os.cpu_count() or 1) or 1
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(requests) + len(cpu_configs), desc="psa-tvm build", unit="build")

    def run(request: BuildRequest) -> dict | None:
        try:
            return build_one(request, out, arch_list, compiler, ptx)
        except Exception as err:
            if not keep_going:
                raise
            print(f"skipped {request.config.tag} {request.schedule} {request.params}: "
                  f"{str(err).strip().splitlines()[-1][:200]}", file=sys.stderr)
            return None
        finally:
            if bar is not None:
                bar.update(1)

    def run_cpu(config: OpConfig) -> dict:
        try:
            return build_cpu_library(config, out)
        finally:
            if bar is not None:
                bar.update(1)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        entries = [e for e in pool.map(run, requests) if e is not None]
        cpu_entries = list(pool.map(run_cpu, cpu_configs))
    if bar is not None:
        bar.close()
    path = write_manifest(out, entries, cpu_entries)
    if native:
        write_native(out)
    return path


def write_native(out: Path) -> None:
    """Regenerate the directory's native library from its manifest. A missing compiler or CUDA
    toolkit is a warning saying what to install, not a failure: the Python launcher still runs
    every build."""
    from psa_tvm.compiler.native import NativeBuildError, write_native_library

    try:
        result = write_native_library(out)
    except NativeBuildError as err:
        print(f"psa-tvm build: no native library written: {err}", file=sys.stderr)
        return
    for warning in result.warnings:
        print(f"psa-tvm build: {warning}", file=sys.stderr)
    for skipped in result.skipped:
        print(f"psa-tvm build: {skipped.source} is not in the native library: {skipped.reason}",
              file=sys.stderr)


def write_manifest(out: Path, entries: list[dict], cpu_entries: Iterable[dict] = ()) -> Path:
    """Merge ``entries`` (GPU builds) and ``cpu_entries`` (CPU libraries) into
    ``out/manifest.json``; a rebuilt source or library replaces its old entry."""
    path = out / MANIFEST_NAME
    with open(out / ".manifest.lock", "w") as lock:  # builds into one directory may overlap
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _merge_manifest(path, entries, list(cpu_entries))


def _same_kind(a: dict, b: dict) -> bool:
    """Two manifest entries of one configuration, op and schedule."""
    return a.get("op", "merge") == b.get("op", "merge") and all(
        a[k] == b[k] for k in ("key_dim", "num_heads", "dtype", "schedule"))


def _merge_manifest(path: Path, entries: list[dict], cpu_entries: list[dict]) -> Path:
    builds: dict[str, dict] = {}
    cpu: dict[str, dict] = {}
    if path.exists():
        old = json.loads(path.read_text())
        builds = {b["source"]: b for b in old["builds"]}
        cpu = {c["path"]: c for c in old.get("cpu_libraries", ())}
    for entry in cpu_entries:
        stale = [p for p, c in cpu.items() if (c["key_dim"], c["num_heads"], c["dtype"]) == (
            entry["key_dim"], entry["num_heads"], entry["dtype"])]
        for key in stale:  # one CPU library per configuration: the newest definition
            del cpu[key]
        cpu[entry["path"]] = entry
    for entry in entries:
        old = builds.get(entry["source"])
        # The same parameters built again as a tuning candidate stay the preferred build.
        preferred = entry["preferred"] or bool(old and old["preferred"])
        default = entry.get("default", False) or bool(old and old.get("default"))
        builds[entry["source"]] = {**entry, "preferred": preferred, "default": default}
        if entry.get("default"):  # the newest default build of its kind: older ones step down
            for source, other in builds.items():
                if source != entry["source"] and other.get("default") and _same_kind(other, entry):
                    builds[source] = {**other, "default": False}
    manifest = {
        "format": MANIFEST_FORMAT,
        "psa_tvm_version": __version__,
        "tvm_version": tvm.__version__,
        "builds": sorted(builds.values(), key=lambda b: b["source"]),
        "cpu_libraries": sorted(cpu.values(), key=lambda c: c["path"]),
    }
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(path)
    return path
