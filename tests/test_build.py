"""The ahead-of-time build, checked without a GPU: manifest contents against the lowered TIR and
the generated CUDA, the device binaries, ptxas's resource report, the CLI and the CPU cache."""

from __future__ import annotations

import glob
import importlib.util
import itertools
import json
import operator
import os
import re
import shutil
import struct
import subprocess

import pytest
import tvm
import tvm_ffi
from tvm import tirx

from psa_tvm import cli
from psa_tvm._version import __version__
from psa_tvm.compiler import band as band_kernels
from psa_tvm.compiler import cpu
from psa_tvm.compiler import shifted as shifted_kernels
from psa_tvm.compiler.artifact import (
    BuildRequest,
    build_artifacts,
    schedule_module,
    variant_widths,
)
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.config import OpConfig
from psa_tvm.runtime import cpu as runtime_cpu
from psa_tvm.runtime.manifest import (
    KernelParam,
    Manifest,
    SymbolBinding,
    evaluate,
    kernel_symbol,
)
from tests.helpers import shifted_backward_at_aligned_n

DTYPES = ("float32", "float16", "bfloat16")
SCHEDULES = ("rowwise", "tiled")
ARCHS = ("sm_80", "sm_90")
KD, NH = 32, 4
C_TYPES = {"float32": "float", "float16": "half", "bfloat16": "nv_bfloat16"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
# Bytes of the CUDA types TVM's codegen uses for vector accesses.
VECTOR_BYTES = {"float4": 16, "uint4": 16, "int4": 16, "float2": 8, "uint2": 8, "half4": 8,
                "nv_bfloat164": 8, "half2": 4, "nv_bfloat162": 4, "uint1": 4}
# Sign fix-ups TVM emits around a C '/' or '%' to get floor semantics with symbolic divisors.
FLOOR_FIXUP = re.compile(r"\brmod\w*\b|\brdiv\w*\b|>=\s*(?:\(\w+\))?0\)\s*&&")
EM_CUDA = 190


@pytest.fixture(scope="module")
def multi_arch_artifacts(tmp_path_factory):
    out = tmp_path_factory.mktemp("build_artifacts")
    requests = [BuildRequest(OpConfig(KD, NH, dtype), schedule)
                for dtype, schedule in itertools.product(DTYPES, SCHEDULES)]
    build_artifacts(requests, out, list(ARCHS))
    return out


@pytest.fixture(scope="module")
def manifest(multi_arch_artifacts):
    return Manifest.load(multi_arch_artifacts)


@pytest.fixture(scope="module")
def raw_manifest(multi_arch_artifacts):
    return json.loads((multi_arch_artifacts / "manifest.json").read_text())


def raw_kernels(raw_manifest):
    for build in raw_manifest["builds"]:
        for kernel in build["kernels"]:
            yield build, kernel


def kernel_bodies(source: str) -> dict[str, tuple[int | None, list[str], str]]:
    """entry -> (launch bounds, parameter declarations, body) of every kernel definition."""
    kernels = {}
    head = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\((\d+)(?:, \d+)?\) )?'
                      r"(\w+)\(([^)]*)\)\s*\{")  # a band kernel's bound adds its CTAs per SM
    for match in head.finditer(source):
        depth, i = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            i += 1
        bounds = int(match.group(1)) if match.group(1) else None
        params = [p.strip() for p in match.group(3).split(",")]
        kernels[match.group(2)] = (bounds, params, source[match.end():i])
    return kernels


# ----------------------------------------------------------------------- manifest
def test_manifest_has_every_dtype_schedule_and_arch(manifest, raw_manifest):
    assert raw_manifest["psa_tvm_version"] == __version__
    assert raw_manifest["tvm_version"] == tvm.__version__
    found = {(b.config.dtype, b.schedule) for b in manifest.builds}
    assert found == set(itertools.product(DTYPES, SCHEDULES))
    for build in manifest.builds:
        assert build.config == OpConfig(KD, NH, build.config.dtype)
        assert build.archs == ARCHS
        assert build.source.is_file()
        covered = set()
        for binary in build.binaries:
            assert binary.path.is_file()
            covered.update(binary.archs)
        assert covered == set(ARCHS)
        for kernel in build.kernels:
            assert set(kernel.resources) == set(ARCHS), f"{kernel.entry}: no ptxas report"


def test_every_build_has_its_kernel_variants(manifest):
    for build in manifest.builds:
        variants = {(k.pass_, k.vec_kd, k.vec, k.index_dtype, k.shifted, k.band, k.max_n,
                     k.min_numel) for k in build.kernels}
        assert len(variants) == len(build.kernels), "duplicate variants"
        itemsize = ITEMSIZE[build.config.dtype]
        if build.schedule == "rowwise":
            assert build.vector_width == 1
        else:
            assert build.vector_width * itemsize == 16
        for pass_ in ("forward", "backward"):
            widest = max(k.vec for k in build.kernels
                         if k.pass_ == pass_ and k.index_dtype == "int32")
            assert widest == build.vector_width
            for index_dtype in ("int32", "int64"):
                widths = [(k.vec_kd, k.vec) for k in build.kernels
                          if k.pass_ == pass_ and k.index_dtype == index_dtype
                          and not k.shifted and not k.band]
                assert sorted(widths, reverse=True) == sorted(
                    variant_widths(build.vector_width, index_dtype), reverse=True)
                assert (1, 1) in widths, f"{build.source.name}: no scalar {pass_} kernel"
                assert max(max(w) for w in widths) * itemsize <= 16
                if build.schedule == "tiled":
                    assert max(w[0] for w in widths) > 1, "tiled vectorizes every index width"
        for kernel in build.kernels:
            n_range = (kernel.min_n, kernel.max_n) if kernel.band else None
            symbol = kernel_symbol(kernel.pass_, build.schedule, kernel.vec, kernel.index_dtype,
                                   kernel.vec_kd, shifted=kernel.shifted, band=kernel.band,
                                   band_threads=int(kernel.block[0]) if kernel.band else 0,
                                   n_range=n_range)
            assert kernel.entry == f"{symbol}_kernel"
        # Tiled merge builds of key_dim 32 add a band kernel per default params (int32).
        bands = sorted((k.pass_, k.index_dtype, k.min_n, k.max_n, k.rank)
                       for k in build.kernels if k.band)
        wanted = band_kernels.default_params(build.config) if (
            build.schedule, build.op) == ("tiled", "merge") else ()
        assert bands == sorted((p.pass_, "int32", p.min_n, p.max_n,
                                band_kernels.rank(build.config)) for p in wanted)
        # Tiled merge builds add the shifted N side (int32, both passes).
        shifted = {k.pass_ for k in build.kernels if k.shifted}
        if build.schedule == "tiled" and build.op == "merge" and shifted_kernels.fits(
                build.config, shifted_kernels.default_params(build.config)) is None:
            assert shifted == {"forward", "backward"}
            # A kernel listed twice is one entry: the backward, also at N % vec == 0, where the
            # build's shifted params set bwd_aligned (16-bit, key_dim 128 by default).
            records = sorted((k.pass_, k.vec, k.rank) for k in build.kernels if k.shifted)
            twice = [("backward", build.vector_width, 2 * build.vector_width + 1)]
            aligned = shifted_backward_at_aligned_n(build)
            assert records == sorted([(p, 1, shifted_kernels.rank(build.config))
                                      for p in ("forward", "backward")]
                                     + (twice if aligned else [])), build.source.name
            assert len({k.entry for k in build.kernels if k.shifted}) == 2
        else:
            assert not shifted


# ----------------------------------------------------------------------- manifest vs TIR
_TIR_OPS = {tirx.Add: operator.add, tirx.Sub: operator.sub, tirx.Mul: operator.mul,
            tirx.FloorDiv: operator.floordiv, tirx.FloorMod: operator.mod, tirx.Max: max,
            tirx.Min: min}


def tir_value(expr, env: dict[str, int]) -> int:
    """A TIR index expression's value: an evaluator independent of the manifest's."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return env[expr.name]
    if isinstance(expr, tirx.Cast):
        return tir_value(expr.value, env)
    for cls, fn in _TIR_OPS.items():
        if isinstance(expr, cls):
            return fn(tir_value(expr.a, env), tir_value(expr.b, env))
    raise AssertionError(f"unexpected launch extent {expr!r}")


def thread_extents(func) -> dict[str, list]:
    """Launch tag -> extents of the loops the schedule bound to it (or, in a hand-written
    kernel such as compiler/shifted.py's, of its ``T.launch_thread`` statements)."""
    extents: dict[str, list] = {}

    def visit(loop) -> bool:
        if loop.kind == tirx.ForKind.THREAD_BINDING:
            extents.setdefault(loop.thread_binding.thread_tag, []).append(loop.extent)
        return True

    def visit_attr(stmt) -> bool:
        if stmt.attr_key == "thread_extent":
            extents.setdefault(stmt.node.thread_tag, []).append(stmt.value)
        return True

    tvm_ffi.structural_walk(func.body, ((tirx.For, visit), (tirx.AttrStmt, visit_attr)))
    return extents


def request_for(build) -> BuildRequest:
    request = BuildRequest(build.config, build.schedule)
    assert str(build.root / f"{request.stem}.cu") == str(build.source)  # default params
    return request


@pytest.mark.parametrize(("dtype", "schedule"), list(itertools.product(DTYPES, SCHEDULES)))
def test_manifest_contract_matches_lowered_tir(manifest, raw_manifest, dtype, schedule):
    build = manifest.find(OpConfig(KD, NH, dtype), schedule)
    scheduled = schedule_module(request_for(build))
    lowered = lower_cuda({symbol: func for symbol, (_, func) in scheduled.items()})
    raw = next(b for b in raw_manifest["builds"] if b["source"].endswith(build.source.name)
               and b["dtype"] == dtype)
    assert {k.entry for k in build.kernels} == {f"{s}_kernel" for s in scheduled}
    for kernel, raw_kernel in zip(build.kernels, raw["kernels"], strict=True):
        symbol = kernel.entry.removesuffix("_kernel")
        variant, func = scheduled[symbol]
        # A shifted kernel runs at any N; its second record (16-bit backward) claims N % vec_kd.
        vec = variant.vec if kernel.vec == variant.vec or not variant.shifted else variant.vec_kd
        assert (variant.pass_, vec, variant.vec_kd, variant.index_dtype) == (
            kernel.pass_, kernel.vec, kernel.vec_kd, kernel.index_dtype)
        contract = lowered.kernels[symbol]
        assert contract["entry"] == kernel.entry
        assert [p["name"] for p in contract["params"]] == [p.name for p in kernel.params]
        assert tuple(KernelParam.from_json(p) for p in contract["params"]) == kernel.params
        assert tuple(contract["grid"]) == kernel.grid
        assert tuple(contract["block"]) == kernel.block
        assert {k: SymbolBinding.from_json(v) for k, v in contract["symbols"].items()} == (
            kernel.symbols)
        assert contract["static_smem_bytes"] == raw_kernel["static_smem_bytes"]
        # Only a band tile past 48 KB is dynamic (compiler/band.py).
        dynamic = (band_kernels.shared_bytes(build.config, variant.band) if variant.band
                   and band_kernels.dynamic_shared(build.config, variant.band) else 0)
        assert contract["dynamic_smem_bytes"] == kernel.dynamic_smem_bytes == dynamic

        # Independently of lower.py: the loops the schedule bound to blockIdx/threadIdx.
        bound = thread_extents(func)
        assert set(bound) <= {f"{k}.{a}" for k in ("blockIdx", "threadIdx") for a in "xyz"}
        for batch, nv in ((1, 1), (3, 50), (7, 91), (64, 4096)):
            env = {"B": batch, "NV": nv, "N": nv}  # shifted and band kernels take N itself
            for kind, exprs in (("blockIdx", kernel.grid), ("threadIdx", kernel.block)):
                for axis, expr in zip("xyz", exprs, strict=True):
                    values = {tir_value(e, env) for e in bound.get(f"{kind}.{axis}", [1])}
                    assert values == {evaluate(expr, env)}, f"{kernel.entry} {kind}.{axis}"
        # The parameter list is the PrimFunc's: every tensor once, plus the shape symbols.
        tensors = [p.tensor for p in kernel.params if p.kind == "ptr"]
        assert sorted(tensors) == sorted(p.name for p in func.params if hasattr(p.ty, "shape"))
        scalars = [p.name for p in kernel.params if p.kind != "ptr"]
        assert sorted(scalars) == ["B", "N" if kernel.shifted or kernel.band else "NV"]
        assert {p.kind for p in kernel.params if p.kind != "ptr"} == {kernel.index_dtype}


def test_cuda_signatures_list_params_in_manifest_order(manifest):
    for build in manifest.builds:
        kernels = kernel_bodies(build.source.read_text())
        assert set(kernels) == {k.entry for k in build.kernels}
        c_type = C_TYPES[build.config.dtype]
        for kernel in build.kernels:
            bounds, decls, _ = kernels[kernel.entry]
            names = [d.split()[-1] for d in decls]
            assert names == [p.name for p in kernel.params], kernel.entry
            for decl, param in zip(decls, kernel.params, strict=True):
                if param.kind == "ptr":
                    assert decl.startswith(f"{c_type}* "), decl
                else:
                    assert decl.split()[0] == {"int32": "int", "int64": "int64_t"}[param.kind]
            block = [evaluate(e, {}) for e in kernel.block]
            assert bounds == block[0] * block[1] * block[2], kernel.entry


def test_int64_variants_take_int64_params(manifest):
    seen = 0
    for build in manifest.builds:
        kernels = kernel_bodies(build.source.read_text())
        for kernel in build.kernels:
            if kernel.index_dtype != "int64":
                continue
            seen += 1
            assert [p.kind for p in kernel.params if p.kind != "ptr"] == ["int64", "int64"]
            decls = kernels[kernel.entry][1]
            assert decls[-2:] == ["int64_t B", "int64_t NV"], kernel.entry
            assert all("T.int64" in e or e.isdigit() for e in kernel.grid + kernel.block)
    assert seen == sum(2 * len(variant_widths(b.vector_width, "int64"))
                       for b in manifest.builds)


# ----------------------------------------------------------------------- device binaries
def find_cuobjdump() -> str | None:
    """$CUOBJDUMP, PATH, the CUDA toolkit, or the `nvidia-cuda-cuobjdump` wheel."""
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            candidates.append(os.path.join(root, "bin", "cuobjdump"))
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(glob.glob(os.path.join(base, "*", "bin", "cuobjdump")))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def fatbin_entries(data: bytes) -> list[tuple[int, int, bytes]]:
    """(kind: 1 PTX / 2 ELF, sm version, payload) of each entry of a fatbin container."""
    magic, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    assert magic == 0xBA55ED50, "not a fatbin"
    entries, offset = [], header
    while offset < header + size:
        kind, _, entry_header, padded = struct.unpack_from("<HHIQ", data, offset)
        (sm,) = struct.unpack_from("<I", data, offset + 28)
        entries.append((kind, sm, data[offset + entry_header: offset + entry_header + padded]))
        offset += entry_header + padded
    return entries


def elf_images(build, multi_arch_artifacts) -> dict[int, bytes]:
    """sm version -> ELF (cubin) image, from fatbins or plain cubins."""
    images = {}
    for binary in build.binaries:
        data = binary.path.read_bytes()
        if binary.format == "fatbin":
            for kind, sm, payload in fatbin_entries(data):
                if kind == 2:
                    images[sm] = payload
        else:
            (arch,) = binary.archs
            images[int(arch.removeprefix("sm_"))] = data
    return images


def test_binaries_hold_sass_for_each_arch(manifest, multi_arch_artifacts):
    """Parsed here without CUDA tools: one CUDA ELF per arch, holding every kernel."""
    for build in manifest.builds:
        images = elf_images(build, multi_arch_artifacts)
        assert set(images) == {int(a.removeprefix("sm_")) for a in ARCHS}
        for sm, elf in images.items():
            assert elf[:4] == b"\x7fELF"
            (machine,) = struct.unpack_from("<H", elf, 18)
            (flags,) = struct.unpack_from("<I", elf, 48)
            assert machine == EM_CUDA
            assert sm in (flags & 0xFF, (flags >> 8) & 0xFF), hex(flags)
            for kernel in build.kernels:
                assert kernel.entry.encode() + b"\0" in elf, f"{kernel.entry} not in sm_{sm}"
        for binary in build.binaries:
            if binary.format == "fatbin":
                data = binary.path.read_bytes()
                ptx = {sm for kind, sm, _ in fatbin_entries(data) if kind == 1}
                assert ptx == {int(p.removeprefix("compute_")) for p in binary.ptx}


def test_cuobjdump_lists_elf_for_each_arch(manifest, multi_arch_artifacts):
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found ($CUOBJDUMP, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, "
                    "pip nvidia-cuda-cuobjdump)")
    for build in manifest.builds:
        for binary in build.binaries:
            path = binary.path
            listing = subprocess.run([tool, "--list-elf", str(path)], capture_output=True,
                                     text=True, check=True).stdout
            listed = set(re.findall(r"\bsm_\d+\b", listing))
            assert listed == set(binary.archs), listing
            usage = subprocess.run([tool, "--dump-resource-usage", str(path)],
                                   capture_output=True, text=True, check=True).stdout
            for arch, section in _sections_by_arch(usage).items():
                if arch not in binary.archs:
                    continue  # the PTX section
                for kernel in build.kernels:
                    match = re.search(rf"Function {kernel.entry}:\s*\n\s*REG:(\d+) STACK:(\d+) "
                                      r"SHARED:(\d+) LOCAL:(\d+)", section)
                    assert match, f"{kernel.entry} missing for {arch}"
                    report = kernel.resources[arch]
                    assert int(match.group(1)) == report["registers"]
                    assert int(match.group(2)) == report["stack_frame"]
                    # SHARED adds the CTA-reserved shared memory (1 KiB on sm_90) to ptxas's.
                    assert int(match.group(3)) >= report["smem_bytes"]


def _sections_by_arch(usage: str) -> dict[str, str]:
    parts = re.split(r"^arch = (sm_\d+)\s*$", usage, flags=re.MULTILINE)
    sections: dict[str, str] = {}
    for arch, text in zip(parts[1::2], parts[2::2], strict=True):
        sections[arch] = sections.get(arch, "") + text
    return sections


def test_binary_for_picks_exact_sass_then_ptx(manifest, multi_arch_artifacts):
    build = manifest.find(OpConfig(KD, NH, "float16"), "tiled")
    for arch in ARCHS:
        path = build.binary_for(arch).path
        assert path.is_file() and arch in next(b.archs for b in build.binaries
                                               if b.path == path)
    path = build.binary_for("sm_100").path  # newer GPU: the PTX JIT-compiles there
    assert path.is_file()
    with pytest.raises(LookupError, match="--arch sm_75"):
        build.binary_for("sm_75")


@pytest.mark.parametrize("arch", ["sm_86", "sm_89"])
def test_binary_for_same_major_arch_uses_compatible_sass(manifest, arch):
    build = manifest.find(OpConfig(KD, NH, "float16"), "tiled")
    path = build.binary_for(arch).path
    assert path.is_file()


# ----------------------------------------------------------------------- ptxas and source
def test_ptxas_shared_memory_matches_the_tir_allocation(raw_manifest):
    for build, kernel in raw_kernels(raw_manifest):
        for arch in ARCHS:
            assert kernel["resources"][arch]["smem_bytes"] == kernel["static_smem_bytes"], (
                build["source"], kernel["entry"], arch)
        if kernel.get("shifted"):  # kd shifted rows of the tile and its slack, plus skews
            assert 0 < kernel["static_smem_bytes"] <= 48 * 1024
        elif kernel.get("band"):  # a [rows, max_n] band (compiler/band.py), past 48 KB dynamic
            # (rounded up to the 64 bytes TVM aligns a shared array to, which ptxas allocates)
            tile = -(-kernel["band"] * kernel["max_n"] * ITEMSIZE[build["dtype"]] // 64) * 64
            dynamic = tile > 48 * 1024
            assert (kernel["static_smem_bytes"], kernel["dynamic_smem_bytes"]) == (
                (0, tile) if dynamic else (tile, 0)), (build["source"], kernel["entry"])
        elif build["schedule"] == "tiled":  # one [kd, tile_n] tile, rows padded by pad_bytes
            params, itemsize = build["schedule_params"], ITEMSIZE[build["dtype"]]
            row_bytes = params["tile_n"] * itemsize + params["pad_bytes"]
            assert kernel["static_smem_bytes"] == KD * row_bytes, (build["source"],
                                                                   kernel["entry"])
        else:
            assert kernel["static_smem_bytes"] == 0


def test_tiled_kernels_do_not_spill(manifest):
    checked = 0
    for build in manifest.builds:
        if build.schedule != "tiled":
            continue
        for kernel in build.kernels:
            for arch in ARCHS:
                report = kernel.resources[arch]
                assert report["spill_stores"] == 0, (kernel.entry, arch, report)
                assert report["spill_loads"] == 0, (kernel.entry, arch, report)
                assert report["stack_frame"] == 0, (kernel.entry, arch, report)
                assert report["registers"] > 0
                checked += 1
    per_dtype = sum(2 * len(variant_widths(16 // ITEMSIZE[d], i))
                    for d in DTYPES for i in ("int32", "int64"))
    # A shifted forward and backward per dtype; a backward with bwd_aligned has a second (vec 8)
    # record; the band kernels of each dtype (compiler/band.py).
    shifted = 2 * len(DTYPES) + sum(shifted_backward_at_aligned_n(b)
                                    for b in manifest.builds if b.schedule == "tiled")
    bands = sum(len(band_kernels.default_params(OpConfig(KD, NH, d))) for d in DTYPES)
    assert checked == (per_dtype + shifted + bands) * len(ARCHS)


def _global_accesses(body: str, pointers: list[str]) -> tuple[set[str], int]:
    """(vector types used to access the global pointers, count of scalar accesses to them)."""
    names = "|".join(pointers)
    vector = set(re.findall(rf"\*\((\w+)\*\)\((?:{names})\b", body))
    scalar = len(re.findall(rf"\b(?:{names})\[", body))
    return vector, scalar


def test_tiled_vectorized_variants_use_16_byte_accesses(manifest):
    for build in manifest.builds:
        if build.schedule != "tiled":
            continue
        kernels = kernel_bodies(build.source.read_text())
        itemsize = ITEMSIZE[build.config.dtype]
        wide = "float4" if build.config.dtype == "float32" else "uint4"
        for kernel in build.kernels:
            if kernel.vec != kernel.vec_kd or kernel.shifted or kernel.band:
                continue  # one width per side; shifted and band kernels: tests/test_tails.py
            pointers = [p.name for p in kernel.params if p.kind == "ptr"]
            body = kernels[kernel.entry][2]
            vector, scalar = _global_accesses(body, pointers)
            if kernel.vec == 1:
                assert not vector and scalar, kernel.entry
                continue
            assert scalar == 0, f"{kernel.entry}: scalar global access in a vector kernel"
            assert {VECTOR_BYTES[t] for t in vector} == {kernel.vec * itemsize}, (
                kernel.entry, vector)
            if kernel.index_dtype == "int32" and kernel.vec == build.vector_width:
                assert vector == {wide}, (kernel.entry, vector)
            for pointer in pointers:  # loads and stores both go through the wide type
                assert re.search(rf"\*\(\w+\*\)\({pointer}\b", body), (kernel.entry, pointer)
            stores = re.findall(r"\*\((\w+)\*\)\((\w+_ptr) [^;]*?\)\s*=[^=]", body)
            stored = {ptr for _, ptr in stores}
            written = {"forward": {"out_ptr"}, "backward": {"dlo_ptr", "dhi_ptr"}}
            assert written[kernel.pass_] <= stored, (kernel.entry, stored)


def test_tiled_kernels_have_no_floor_div_fixups(manifest):
    assert FLOOR_FIXUP.search("int rmod = (x % NV); y = (((NV >= 0) && (rmod >= 0)) ? a : b);")
    assert FLOOR_FIXUP.search("((NV * (int64_t)4) >= (int64_t)0) && (r >= (int64_t)0)")
    for build in manifest.builds:
        if build.schedule != "tiled":
            continue
        for entry, (_, _, body) in kernel_bodies(build.source.read_text()).items():
            found = FLOOR_FIXUP.findall(body)
            assert not found, f"{entry}: floor-div/mod sign fix-ups {found[:3]}"


# ----------------------------------------------------------------------- CLI
def test_cli_build_several_configs(tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["build", "--key-dim", "8", "16", "--num-heads", "2", "--dtype", "float16",
            "--schedule", "tiled", "--arch", "sm_90", "-o", str(out), "-q"]
    assert cli.main(argv) == 0
    assert str(out) in capsys.readouterr().out
    built = {(b.config, b.schedule) for b in Manifest.load(out).builds}
    assert {(OpConfig(8, 2, "float16"), "tiled"), (OpConfig(16, 2, "float16"), "tiled")} <= built
    # A second build into the same directory adds to the manifest instead of replacing it.
    assert cli.main(["build", "--key-dim", "8", "--num-heads", "1", "--dtype", "float32",
                     "--schedule", "rowwise", "--arch", "sm_90", "-o", str(out), "-q"]) == 0
    manifest = Manifest.load(out)
    assert built | {(OpConfig(8, 1, "float32"), "rowwise")} == {(b.config, b.schedule)
                                                             for b in manifest.builds}
    for build in manifest.builds:
        assert build.archs == ("sm_90",)
        assert build.source.is_file()
        assert all(b.path.is_file() for b in build.binaries)


def test_cli_inspect_prints_the_tensor_ir(capsys):
    assert cli.main(["inspect", "--key-dim", "8", "--num-heads", "2", "--dtype", "bfloat16"]) == 0
    text = capsys.readouterr().out
    assert "psa_merge_fwd" in text and "psa_merge_bwd" in text and "bfloat16" in text


def test_cli_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["build", "--dtype", "float64", "-o", str(tmp_path)])
    with pytest.raises(ValueError, match=r"arch.*volta"):
        cli.main(["build", "--arch", "volta", "-o", str(tmp_path / "out"), "-q"])
    assert not (tmp_path / "out" / "manifest.json").exists()


# ----------------------------------------------------------------------- CPU build cache
def test_cpu_kernels_are_compiled_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PSA_TVM_CACHE", str(tmp_path))
    calls = []
    real = cpu.compile_cpu

    def counting(config, path):
        calls.append(config)
        return real(config, path)

    monkeypatch.setattr(cpu, "compile_cpu", counting)
    config = OpConfig(8, 2, "float32")
    runtime_cpu.clear_memory_cache()
    first = runtime_cpu.cpu_kernels(config)
    assert len(calls) == 1
    assert first.library.path.is_file() and tmp_path in first.library.path.parents
    assert runtime_cpu.cpu_kernels(config) is first  # memory cache
    runtime_cpu.clear_memory_cache()
    second = runtime_cpu.cpu_kernels(config)
    assert len(calls) == 1, "compiled again although the artifact directory had it"
    assert second.library == first.library
    runtime_cpu.clear_memory_cache()


def test_the_newest_default_build_is_found_after_the_defaults_change(tmp_path):
    """A directory rebuilt after a family op's (or a rule's) defaults changed holds both builds:
    an untuned lookup finds the newest default one, whatever the sources' sort order; explicit
    params still find theirs; tuning candidates never become the default."""
    from psa_tvm.compiler.artifact import write_manifest

    def entry(source: str, params: dict, default: bool, preferred: bool = True) -> dict:
        return {"key_dim": 32, "num_heads": 4, "dtype": "float16", "op": "attn",
                "schedule": "tiled", "schedule_params": params, "vector_width": 8,
                "preferred": preferred, "default": default, "archs": ["sm_90"],
                "source": source, "binaries": [], "kernels": []}

    config = OpConfig(32, 4, "float16")
    # the older build's source sorts first, so "first preferred" alone would pick it
    write_manifest(tmp_path, [entry("kd32_nh4_float16/attn-tiled-0old.cu", {"tile_n": 64}, True)])
    write_manifest(tmp_path, [entry("kd32_nh4_float16/attn-tiled-9new.cu", {"tile_n": 128},
                                    True),
                              entry("kd32_nh4_float16/attn-tiled-5cand.cu", {"tile_n": 32},
                                    False, preferred=False)])
    manifest = Manifest.load(tmp_path)
    assert manifest.find(config, "tiled", op="attn").schedule_params == {"tile_n": 128}
    assert manifest.find(config, "tiled", {"tile_n": 64}, op="attn").schedule_params \
        == {"tile_n": 64}
    assert manifest.find(config, "tiled", {"tile_n": 16}, op="attn").schedule_params \
        == {"tile_n": 128}  # params not built: the default, not any preferred build
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert [b["default"] for b in raw["builds"]] == [False, False, True]
    # a manifest from before the flag: the first preferred build, as before
    for build in raw["builds"]:
        del build["default"]
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    assert Manifest.load(tmp_path).find(config, "tiled", op="attn").schedule_params \
        == {"tile_n": 64}


def test_builds_without_explicit_params_are_marked_default(raw_manifest):
    assert raw_manifest["builds"] and all(b["default"] for b in raw_manifest["builds"])
