"""The native library of an artifact directory: one TVM-FFI shared library for every build.

``psa-tvm build`` calls :func:`write_native_library` after it writes ``manifest.json``. The
library embeds every build's fatbin, a kernel table generated from the manifest (entries,
parameter order, launch dimensions translated from the manifest's TVMScript expressions to C++,
variants ``vec``/``vec_kd``/``index_dtype``, the build each pass uses per GPU architecture) and
the LLVM-built CPU kernels of every configuration, and exports ``merge_forward``,
``merge_backward``, allocating forms and ``plan_forward``/``plan_backward`` (see docs/native.md).
The C++ that does not depend on the manifest lives in ``native_template/``.

Building it needs a C++17 compiler (``$CXX`` or ``g++``), and for the GPU half the CUDA headers
and ``libcudart_static.a`` (``$CUDA_HOME``); both are looked up here and a missing one is
reported with how to get it.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from psa_tvm.config import OpConfig
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.layouts import (
    GATHER_OUTPUT,
    SCATTER_INPUT,
    SCATTER_OUTPUT,
    STREAM_OPS,
    StreamOp,
)
from psa_tvm.runtime.cpu import (
    BACKWARD_SYMBOL,
    FORWARD_SYMBOL,
    LINES_FLOAT32_MAX_BYTES,
    LINES_MIN_N,
    LINES_SYMBOL,
    forward_vec_symbol,
    pairs_symbol,
    prefetch_symbol,
)
from psa_tvm.runtime.env import cpu_mcpu, cuda_roots, cxx_compiler
from psa_tvm.runtime.manifest import MANIFEST_NAME
from psa_tvm.runtime.native import LIBRARY_PREFIX, POINTER_NAME

TEMPLATE_DIR = Path(__file__).with_name("native_template")
CPU_POOL_SOURCE = Path(__file__).with_name("cpu_pool.cc")
_ROLES = {"lo": "kLo", "hi": "kHi", "out": "kOut", "g": "kG", "dlo": "kDlo", "dhi": "kDhi"}
_ROLE_RANK = {"lo": 3, "hi": 3, "dlo": 3, "dhi": 3, "out": 5, "g": 5}
_MERGE_ROLES = {p: {name: (role, _ROLE_RANK[name]) for name, role in _ROLES.items()}
                for p in ("forward", "backward")}
_PASSES = {"forward": "kForward", "backward": "kBackward"}
_KINDS = {"ptr": "kPtr", "int32": "kI32", "int64": "kI64"}
_DTYPES = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16)}  # DLPack code, bits
_MAX_PARAMS, _MAX_SYMBOLS = 16, 8
_DEFAULT_ARCH = "sm_0"  # an arch no tuned table names: the untuned choice
_LOCK = threading.Lock()


class NativeBuildError(RuntimeError):
    """The native library cannot be built here (a tool is missing, or the compiler failed)."""


def _generator_digest() -> bytes:
    """This generator and its C++ templates: editing them must give the library a new name
    (a process that loaded the old file keeps it mapped, and dlopen of a known path reuses it)."""
    sha = hashlib.sha1(Path(__file__).read_bytes())
    for header in sorted(TEMPLATE_DIR.glob("*.h")):
        sha.update(header.read_bytes())
    # The CPU kernels' definition (TensorIR, schedule, build, target override), as
    # psa_tvm.compiler.cpu.DEFINITION_DIGEST, read here without importing TVM.
    here = Path(__file__).parent
    for path in (CPU_POOL_SOURCE, here / "compute.py", here / "cpu_pairs.py",
                 here / "rules" / "cpu.py", here / "rules" / "cpu_shuffle.py",
                 here / "rules" / "cpu_lines.py", here / "cpu.py"):
        sha.update(path.read_bytes())
    # The layout family's tensor lists and kernel views (the stream tables are built from them).
    sha.update((here.parent / "layouts.py").read_bytes())
    sha.update((cpu_mcpu() or "").encode())
    sha.update("\n".join(_run_time_constants()).encode())
    return sha.digest()


def _run_time_constants() -> list[str]:
    """The Python run time's launch-rule constants as C++, so that the native library's CPU
    choice (``TakesLines`` in ``psa_native_impl.h``) and :func:`psa_tvm.runtime.cpu.takes_lines`
    read the same values (tests/test_native.py checks that the two plan alike)."""
    return [f"constexpr int64_t kLinesMinN = {LINES_MIN_N};",
            f"constexpr int64_t kLinesFloat32MaxBytes = {LINES_FLOAT32_MAX_BYTES};"]


def library_name(manifest_bytes: bytes) -> str:
    """File name of the library generated from a manifest with these bytes."""
    digest = hashlib.sha1(manifest_bytes + _generator_digest()).hexdigest()[:12]
    return f"{LIBRARY_PREFIX}{digest}.so"


# ----------------------------------------------------------------------------- toolchain
@dataclass(frozen=True)
class Toolchain:
    cxx: str
    tvm_ffi_include: tuple[str, ...]
    tvm_ffi_lib: str
    cuda_include: str | None
    cudart_static: str | None


def find_toolchain() -> Toolchain:
    """The C++ compiler, TVM-FFI's headers and library, and (if present) the CUDA toolkit."""
    cxx = cxx_compiler() or shutil.which("g++") or shutil.which("c++")
    if not cxx or not shutil.which(cxx):
        raise NativeBuildError(
            "the native library needs a C++17 compiler and none was found (set $CXX, or install "
            "g++: `apt-get install g++`, `dnf install gcc-c++` or `conda install gxx`)")
    import tvm_ffi.libinfo as libinfo

    includes = (libinfo.find_include_path(), libinfo.find_dlpack_include_path())
    cuda_home = _cuda_home()
    cuda_include = cudart = None
    if cuda_home is not None:
        inc = cuda_home / "include"
        lib = next((p for p in (cuda_home / "lib64" / "libcudart_static.a",
                                cuda_home / "lib" / "libcudart_static.a",
                                cuda_home / "targets" / "x86_64-linux" / "lib"
                                / "libcudart_static.a") if p.is_file()), None)
        if (inc / "cuda_runtime.h").is_file() and lib is not None:
            cuda_include, cudart = str(inc), str(lib)
    return Toolchain(cxx, includes, libinfo.find_libtvm_ffi(), cuda_include, cudart)


def _cuda_home() -> Path | None:
    for candidate in cuda_roots():
        if Path(candidate, "include", "cuda_runtime.h").is_file():
            return Path(candidate)
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(nvcc).resolve().parent.parent
        if (home / "include" / "cuda_runtime.h").is_file():
            return home
    return None


MISSING_CUDA = (
    "the native library was built without its GPU half: no CUDA headers and libcudart_static.a "
    "(CUDA >= 12.8) were found; install the CUDA toolkit (e.g. `apt-get install "
    "cuda-toolkit-12-8`, or conda's `cuda-cudart-dev cuda-cudart-static`) and set $CUDA_HOME. "
    "Until then CUDA calls run through the Python launcher")


# ----------------------------------------------------------------------------- expressions
class _CxxExpr(ast.NodeVisitor):
    """A manifest launch expression (TVMScript: ``NV + 7 >> 3``, ``B * T.int64(8)``) as C++
    over ``__int128`` (so no intermediate overflows; ``//``, ``%`` are floor operations, ``T.Div``
    and ``T.truncmod`` truncating ones)."""

    _OPS: ClassVar[dict[type, str]] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
                                       ast.RShift: ">>", ast.LShift: "<<"}

    def __init__(self, symbols: dict[str, int]) -> None:
        self.symbols = symbols

    def visit_Constant(self, node: ast.Constant) -> str:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise ValueError(f"unsupported constant {node.value!r}")
        return f"((__int128){node.value}LL)"

    def visit_Name(self, node: ast.Name) -> str:
        if node.id not in self.symbols:
            raise ValueError(f"unknown symbol {node.id!r}")
        return f"((__int128)s[{self.symbols[node.id]}])"

    def visit_BinOp(self, node: ast.BinOp) -> str:
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.FloorDiv):
            return f"psa_floordiv({left}, {right})"
        if isinstance(node.op, ast.Mod):
            return f"psa_floormod({left}, {right})"
        op = self._OPS.get(type(node.op))
        if op is None:
            raise ValueError(f"unsupported operator {type(node.op).__name__}")
        return f"({left} {op} {right})"

    def visit_Call(self, node: ast.Call) -> str:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "Cast":  # T.Cast("int64", x)
            return self.visit(node.args[-1])
        args = [self.visit(a) for a in node.args]
        if name in ("int32", "int64") and len(args) == 1:
            return args[0]
        if name in ("min", "max") and len(args) == 2:
            return f"psa_{name}({args[0]}, {args[1]})"
        if name in ("Div", "truncdiv", "truncmod") and len(args) == 2:  # C's / and %
            return f"({args[0]} {'%' if name == 'truncmod' else '/'} {args[1]})"
        raise ValueError(f"unsupported call {ast.dump(node)}")

    def generic_visit(self, node: ast.AST) -> str:
        raise ValueError(f"unsupported expression node {type(node).__name__}")


def cxx_expression(expr: str | int, symbols: dict[str, int]) -> str:
    """C++ for one manifest expression; ``symbols`` maps names to indices of ``s[]``."""
    tree = ast.parse(str(expr), mode="eval").body
    return _CxxExpr(symbols).visit(tree)


# ----------------------------------------------------------------------------- generation
@dataclass(frozen=True)
class _Skipped:
    source: str
    reason: str


def _kernel_record(k: dict, index: int, build_index: int,
                   roles: dict[str, dict[str, tuple[str, int]]] | None = None
                   ) -> tuple[str, str]:
    """(dims function, Kernel initializer) for one manifest kernel record. ``roles``: per pass,
    tensor name -> (C++ index, rank of the kernels' view); default the merge's ``Role``s."""
    roles_of = (roles or _MERGE_ROLES)[k["pass"]]
    symbols = list(k["symbols"])
    if len(symbols) > _MAX_SYMBOLS or len(k["params"]) > _MAX_PARAMS:
        raise ValueError("too many parameters or symbols")
    sym_index = {name: i for i, name in enumerate(symbols)}
    exprs = [cxx_expression(e, sym_index) for e in (*k["grid"], *k["block"])]
    fn = f"psa_dims_{build_index}_{index}"
    body = "".join(f"  o[{i}] = {e};\n" for i, e in enumerate(exprs))
    dims = f"static void {fn}(const int64_t* s, __int128* o) {{\n  (void)s;\n{body}}}\n"
    params = []
    for p in k["params"]:
        kind = _KINDS[p["type"]]
        if p["type"] == "ptr":
            if p.get("tensor") not in roles_of:
                raise ValueError(f"parameter {p['name']} names unknown tensor {p.get('tensor')!r}")
            index_ = roles_of[p["tensor"]][0]
        else:
            if p.get("symbol") not in sym_index:
                raise ValueError(f"parameter {p['name']} names unknown symbol {p.get('symbol')!r}")
            index_ = str(sym_index[p["symbol"]])
        params.append(f"{{{kind}, {index_}, {json.dumps(p['name'])}}}")
    syms = []
    for name in symbols:
        b = k["symbols"][name]
        if b["tensor"] not in roles_of or not 0 <= b["axis"] < roles_of[b["tensor"]][1]:
            raise ValueError(f"symbol {name} binds to {b['tensor']}[{b['axis']}]")
        if int(b["divisor"]) < 1:
            raise ValueError(f"symbol {name} has divisor {b['divisor']}")
        syms.append(f"{{{json.dumps(name)}, {roles_of[b['tensor']][0]}, {b['axis']}, "
                    f"{int(b['divisor'])}}}")
    vec = int(k["vec"])
    vec_kd = int(k.get("vec_kd", vec))
    record = (f"  {{{_PASSES[k['pass']]}, {vec}, {vec_kd}, "
              f"{1 if k['index_dtype'] == 'int64' else 0}, {json.dumps(k['entry'])}, "
              f"{len(params)}, {{{', '.join(params)}}}, {len(syms)}, {{{', '.join(syms)}}}, "
              f"{fn}, {int(k.get('dynamic_smem_bytes', 0))}u, "
              f"{int(k.get('min_numel', 0))}LL, {int(k.get('max_numel', 0))}LL, "
              f"{int(k.get('min_n', 0))}LL, {int(k.get('max_n', 0))}LL}}")
    return dims, record


def _arch_number(arch: str) -> int:
    return int(arch.removeprefix("sm_").removeprefix("compute_").rstrip("af"))


def tuned_archs() -> list[str]:
    """Architectures with a tuned table (the user's ``$PSA_TVM_SCHEDULES``, then shipped)."""
    from psa_tvm.runtime import tuned
    from psa_tvm.runtime.env import user_schedules_dir

    folders = [user_schedules_dir(), tuned._SOURCE_TREE]
    with contextlib.suppress(ModuleNotFoundError):
        folders.append(Path(str(resources.files("psa_tvm.schedules"))))
    names = {p.stem for folder in folders if folder is not None and folder.is_dir()
             for p in folder.glob("sm_*.json")}
    return sorted(names)


def _choices(root: Path, config: OpConfig, index: dict[str, int]) -> tuple[list[int], list]:
    """Build index per pass, untuned and per tuned arch: exactly the RuntimeOp's choice."""
    from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp

    def pick(arch: str) -> list[int]:
        try:
            builds = PsaMergeAttnRuntimeOp(config.key_dim, config.num_heads, config.dtype,
                                           artifacts=root, arch=arch).builds
        except ArtifactNotFoundError:
            return [-1, -1]
        return [index.get(str(builds[p].source.relative_to(root)), -1)
                for p in ("forward", "backward")]

    default = pick(_DEFAULT_ARCH)
    per_arch = []
    for arch in tuned_archs():
        chosen = pick(arch)
        if chosen != default:
            per_arch.append((_arch_number(arch), chosen))
    return default, per_arch


def generate_source(root: Path, manifest: dict, cpu_objects: dict[OpConfig, dict],
                    digest: str) -> tuple[str, list[_Skipped]]:
    """The translation unit for ``manifest`` (its fatbins are included with ``.incbin``)."""
    out: list[str] = ['#include "psa_native.h"', "", "namespace psa_native {", "",
                      "static inline __int128 psa_floordiv(__int128 a, __int128 b) {",
                      "  __int128 q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1"
                      " : q; }",
                      "static inline __int128 psa_floormod(__int128 a, __int128 b) {",
                      "  __int128 r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;"
                      " }",
                      "static inline __int128 psa_min(__int128 a, __int128 b) "
                      "{ return a < b ? a : b; }",
                      "static inline __int128 psa_max(__int128 a, __int128 b) "
                      "{ return a < b ? b : a; }", "",
                      "// psa_tvm.runtime.cpu's LINES_MIN_N and LINES_FLOAT32_MAX_BYTES.",
                      *_run_time_constants(), ""]
    skipped: list[_Skipped] = []
    builds: list[tuple[dict, list[str], list[tuple[str, str]]]] = []
    for build in manifest["builds"]:
        reason = None
        if build.get("layout") not in (None, "default"):
            reason = f"input layout {build['layout']!r} is not supported by the native library"
        elif build["dtype"] not in _DTYPES:
            reason = f"dtype {build['dtype']}"
        records = []
        op = build.get("op", "merge")
        if reason is None and op != "merge" and op not in STREAM_OPS:
            reason = f"op {op!r} is not one this psa-tvm knows"
        if reason is None:
            try:
                roles = None if op == "merge" else _stream_roles(build)
                # plan.py's order: widest vec_kd, then rank (2*vec; a shifted kernel's below
                # an 8-byte N side), then a kernel with an N range (a whole-row shifted
                # backward) before those without, then the larger min_numel (a split shifted
                # backward's main kernel before its small-call one), so ChooseKernel takes
                # the first that fits. Where two band kernels would hold a call (an N range
                # nested in another; no default build has one), the larger min_numel wins,
                # as in plan.py.
                kernels = sorted(build["kernels"], key=lambda k: (
                    k["pass"], k["index_dtype"], -int(k.get("vec_kd", k["vec"])),
                    -int(k.get("rank", 2 * k["vec"])), -(int(k.get("max_n", 0)) > 0),
                    -int(k.get("min_numel", 0))))
                records = [_kernel_record(k, i, len(builds), roles)
                           for i, k in enumerate(kernels)]
            except (KeyError, ValueError) as err:
                reason = f"kernel table: {err}"
        if reason is None and not all((root / b["path"]).is_file() for b in build["binaries"]):
            reason = "a binary is missing"
        if reason is not None:
            skipped.append(_Skipped(build["source"], reason))
            continue
        builds.append((build, [], records))

    for b_index, (build, _, records) in enumerate(builds):
        for dims, _ in records:
            out.append(dims)
        for i, binary in enumerate(build["binaries"]):
            sym = f"psa_fatbin_{b_index}_{i}"
            path = str((root / binary["path"]).resolve()).replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'__asm__(".section .rodata\\n.balign 64\\n.hidden {sym}\\n'
                       f'.globl {sym}\\n{sym}:\\n.incbin \\"{path}\\"\\n.hidden {sym}_end\\n'
                       f'.globl {sym}_end\\n{sym}_end:\\n.previous\\n");')
            out.append(f'extern "C" const unsigned char {sym}[], {sym}_end[];')
            sass = [_arch_number(a) for a in binary.get("archs", [])]
            ptx = [_arch_number(a) for a in binary.get("ptx", [])]
            out.append(f"static const int {sym}_sass[] = {{{', '.join(map(str, sass)) or '0'}}};")
            out.append(f"static const int {sym}_ptx[] = {{{', '.join(map(str, ptx)) or '0'}}};")
        out.append(f"static const Kernel psa_kernels_{b_index}[] = {{")
        out.append(",\n".join(r for _, r in records))
        out.append("};")
        out.append(f"static const Binary psa_binaries_{b_index}[] = {{")
        for i, binary in enumerate(build["binaries"]):
            sym = f"psa_fatbin_{b_index}_{i}"
            out.append(f"  {{{sym}, static_cast<size_t>({sym}_end - {sym}), {sym}_sass, "
                       f"{len(binary.get('archs', []))}, {sym}_ptx, "
                       f"{len(binary.get('ptx', []))}}},")
        out.append("};")
        out.append("")
    out.append("extern const Build kBuilds[] = {")
    for b_index, (build, _, records) in enumerate(builds):
        out.append(f"  {{{json.dumps(build['source'])}, {json.dumps(build['schedule'])}, "
                   f"psa_binaries_{b_index}, {len(build['binaries'])}, psa_kernels_{b_index}, "
                   f"{len(records)}}},")
    if not builds:
        out.append('  {"", "", nullptr, 0, nullptr, 0},')
    out.append("};")
    out.append(f"extern const int kNumBuilds = {len(builds)};")
    out.append("")

    # Configurations: the union of the manifest's and the CPU kernels'.
    index = {b["source"]: i for i, (b, _, _) in enumerate(builds)}
    stream_lines, stream_keys = _stream_tables(root, [b for b, _, _ in builds], index)
    out.extend(stream_lines)
    configs = sorted({OpConfig(b["key_dim"], b["num_heads"], b["dtype"])
                      for b in manifest["builds"] if b.get("op", "merge") == "merge"}
                     | set(cpu_objects),
                     key=lambda c: (c.key_dim, c.num_heads, c.dtype))
    info_configs = []
    config_lines = []
    out.append("}  // namespace psa_native")
    out.append('extern "C" {')
    for config in configs:
        for symbol in cpu_objects.get(config, {}).get("symbols", ()):
            out.append(f"int __tvm_ffi_{_cpu_prefix(config)}{symbol}(void*, const TVMFFIAny*,"
                       " int32_t, TVMFFIAny*);")
    out.append("}")
    out.append("namespace psa_native {")
    for c_index, config in enumerate(configs):
        if config in cpu_objects:
            out.append(f"static const CpuSet psa_cpu_{c_index} = "
                       f"{_cpu_set(config, cpu_objects[config])};")
    for c_index, config in enumerate(configs):
        default, per_arch = _choices(root, config, index)
        arch_table = f"psa_arch_{c_index}"
        if per_arch:
            rows = ", ".join(f"{{{a}, {{{f}, {b}}}}}" for a, (f, b) in per_arch)
            out.append(f"static const ArchChoice {arch_table}[] = {{{rows}}};")
        code, bits = _DTYPES[config.dtype]
        cpu = f"&psa_cpu_{c_index}" if config in cpu_objects else "nullptr"
        config_lines.append(
            f"  {{{config.key_dim}, {config.num_heads}, {code}, {bits}, "
            f"{json.dumps(config.dtype)}, {{{default[0]}, {default[1]}}}, "
            f"{arch_table if per_arch else 'nullptr'}, {len(per_arch)}, {cpu}}},")
        info_configs.append({"key_dim": config.key_dim, "num_heads": config.num_heads,
                             "dtype": config.dtype, "cpu": config in cpu_objects,
                             **({"cpu_kernels": {k: cpu_objects[config][k] for k in (
                                 "forward_vec", "pairs_forward_vec", "pairs_backward",
                                 "prefetch", "lines", "symbols")}} if config in cpu_objects
                                else {}),
                             "builds": {"default": [builds[i][0]["source"] if i >= 0 else None
                                                    for i in default],
                                        **{f"sm_{a}": [builds[i][0]["source"] if i >= 0
                                                       else None for i in chosen]
                                           for a, chosen in per_arch}}})
    out.append("extern const Config kConfigs[] = {")
    out.extend(config_lines or ['  {0, 0, 0, 0, "", {-1, -1}, nullptr, 0, {nullptr, nullptr}},'])
    out.append("};")
    out.append(f"extern const int kNumConfigs = {len(configs)};")
    out.append(f'extern const char kManifestDigest[] = "{digest}";')
    info = {"manifest_digest": digest, "configs": info_configs, "stream_ops": list(STREAM_OPS),
            "stream_configs": [list(key) for key in stream_keys],
            "skipped": [{"source": s.source, "reason": s.reason} for s in skipped]}
    out.append(f"extern const char kLibraryInfo[] = {json.dumps(json.dumps(info))};")
    out.append("}  // namespace psa_native")
    out.append("")
    out.append('#include "psa_native_impl.h"')
    out.append('#include "psa_native_stream.h"')
    return "\n".join(out) + "\n", skipped


# ----------------------------------------------------------------------------- layout family
_SENTINEL_B, _SENTINEL_N = 1_000_003, 1_000_033  # primes no configuration constant equals


def _stream_views(op: StreamOp, pass_: str, num_heads: int, key_dim: int
                  ) -> dict[str, tuple[tuple[int, int], ...]]:
    """Each tensor's kernel view as ((extent, var), ...), var 0 = constant, 1 = B, 2 = N."""
    shapes = op.kernel_shapes(pass_, _SENTINEL_B, _SENTINEL_N, num_heads, key_dim)
    var = {_SENTINEL_B: 1, _SENTINEL_N: 2}
    return {name: tuple((0 if e in var else e, var.get(e, 0)) for e in shape)
            for name, shape in shapes.items()}


def _stream_roles(build: dict) -> dict[str, dict[str, tuple[str, int]]]:
    """Per pass: tensor name -> (index in the call's tensors, rank of the kernels' view)."""
    op = STREAM_OPS[build["op"]]
    roles = {}
    for pass_ in op.passes:
        views = _stream_views(op, pass_, build["num_heads"], build["key_dim"])
        roles[pass_] = {name: (str(i), len(views[name]))
                        for i, name in enumerate(op.tensor_names(pass_))}
    return roles


def _braced(*items: object) -> str:
    """A C++ brace initializer of ``items``."""
    return "{" + ", ".join(map(str, items)) + "}"


def _stream_tables(root: Path, builds: list[dict], index: dict[str, int]
                   ) -> tuple[list[str], list[tuple]]:
    """``kStreamOps`` and a ``StreamConfig`` per (op, key_dim, num_heads, dtype) with builds:
    the build each pass uses (the RuntimeOp's choice) and the tensors' kernel views."""
    from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp

    names = list(STREAM_OPS)
    lines = ["extern const char* const kStreamOps[] = {"
             + ", ".join(json.dumps(n) for n in names) + "};",
             f"extern const int kNumStreamOps = {len(names)};",
             "extern const StreamConfig kStreamConfigs[] = {"]
    keys = sorted({(b["op"], b["key_dim"], b["num_heads"], b["dtype"])
                   for b in builds if b.get("op", "merge") != "merge"})
    included = []
    for op_name, key_dim, num_heads, dtype in keys:
        op = STREAM_OPS[op_name]
        try:
            chosen = PsaStreamRuntimeOp(op_name, key_dim, num_heads, dtype,
                                        artifacts=root).builds
        except ArtifactNotFoundError:
            continue
        build_index = [index.get(str(chosen[p].source.relative_to(root)), -1)
                       if p in chosen else -1 for p in ("forward", "backward")]
        if max(build_index) < 0:
            continue
        specs = []
        for pass_ in ("forward", "backward"):
            if pass_ not in op.passes:
                specs.append("{0, {}, {}, {}}")
                continue
            views = _stream_views(op, pass_, num_heads, key_dim)
            tensor_names = op.tensor_names(pass_)
            flat = {GATHER_OUTPUT, SCATTER_INPUT, SCATTER_OUTPUT}
            shapes = _braced(*(_braced(len(views[t]), _braced(*(e for e, _ in views[t])),
                                       _braced(*(v for _, v in views[t])))
                               for t in tensor_names))
            specs.append(_braced(len(tensor_names), _braced(*map(json.dumps, tensor_names)),
                                 shapes, _braced(*("true" if t in flat else "false"
                                                   for t in tensor_names))))
        code, bits = _DTYPES[dtype]
        lines.append(f"  {{{names.index(op_name)}, {key_dim}, {num_heads}, {op.num_streams}, "
                     f"{code}, {bits}, {json.dumps(dtype)}, {{{build_index[0]}, "
                     f"{build_index[1]}}}, {{{specs[0]}, {specs[1]}}}}},")
        included.append((op_name, key_dim, num_heads, dtype))
    if not included:
        lines.append('  {0, 0, 0, 0, 0, 0, "", {-1, -1}, {}},')
    lines += ["};", f"extern const int kNumStreamConfigs = {len(included)};", ""]
    return lines, included


def _cpu_prefix(config: OpConfig) -> str:
    """Prefix of ``config``'s CPU kernels in the native library (the run time's symbols follow)."""
    return f"psa_native_{config.tag}_"


def _cpu_set(config: OpConfig, facts: dict) -> str:
    """The ``CpuSet`` initializer of ``config`` (see psa_native.h)."""
    def kernel(symbol: str | None) -> str:
        if symbol is None:
            return "{nullptr, nullptr}"
        return f"{{__tvm_ffi_{_cpu_prefix(config)}{symbol}, {json.dumps(symbol)}}}"

    fvec, pvec = facts["forward_vec"], facts["pairs_forward_vec"]
    return (f"{{{kernel(FORWARD_SYMBOL)}, {kernel(BACKWARD_SYMBOL)}, {fvec}, "
            f"{kernel(forward_vec_symbol(fvec) if fvec > 1 else None)}, {pvec}, "
            f"{kernel(pairs_symbol('forward', pvec) if pvec else None)}, "
            f"{'true' if facts['pairs_backward'] else 'false'}, "
            f"{kernel(pairs_symbol('backward') if facts['pairs_backward'] else None)}, "
            f"{kernel(prefetch_symbol('forward') if facts['prefetch'] else None)}, "
            f"{kernel(prefetch_symbol('backward') if facts['prefetch'] else None)}, "
            f"{kernel(LINES_SYMBOL if facts.get('lines') else None)}}}")


def compile_cpu_object(configs: list[OpConfig], path: Path) -> dict[OpConfig, dict]:
    """The scheduled CPU kernels of ``configs`` (exactly those of the per-configuration CPU
    library, :func:`psa_tvm.compiler.cpu.scheduled_cpu_kernels`, for the same targets) as
    object files: ``path``, and the aligned-line forwards (x86-64-v4) in
    :func:`lines_object_path` where any configuration has one; returns per configuration the
    facts that choose among them and the run time's symbols (TVM needed here only)."""
    from psa_tvm.compiler.cpu import compile_modules, scheduled_cpu_kernels

    funcs, lines_funcs = {}, {}
    facts = {}
    for config in configs:
        prefix = _cpu_prefix(config)
        kernels = scheduled_cpu_kernels(config, prefix)
        funcs.update(kernels.funcs)
        lines_funcs.update(kernels.lines_funcs)
        facts[config] = {"forward_vec": kernels.forward_vec,
                         "pairs_forward_vec": kernels.pairs_forward_vec,
                         "pairs_backward": kernels.pairs_backward,
                         "prefetch": kernels.prefetch, "lines": kernels.lines,
                         "symbols": sorted(name.removeprefix(prefix)
                                           for name in (*kernels.funcs, *kernels.lines_funcs))}
    module, lines = compile_modules(funcs, lines_funcs)
    module.write_to_file(str(path))
    if lines is not None:
        lines.write_to_file(str(lines_object_path(path)))
    return facts


def lines_object_path(path: Path) -> Path:
    """Where :func:`compile_cpu_object` puts the aligned-line kernels beside ``path``."""
    return path.with_name(f"{path.stem}_lines.o")


def compile_library(source: str, out: Path, tools: Toolchain, objects: list[Path],
                    workdir: Path) -> None:
    cc = workdir / "psa_native.cc"
    cc.write_text(source)
    cuda = tools.cuda_include is not None
    cmd = [tools.cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
           f"-I{TEMPLATE_DIR}", *(f"-I{p}" for p in tools.tvm_ffi_include),
           f"-DPSA_NATIVE_CUDA={1 if cuda else 0}",
           f"-DPSA_NATIVE_CPU_POOL={1 if CPU_POOL_SOURCE in objects else 0}", "-pthread"]
    if cuda:
        cmd.append(f"-I{tools.cuda_include}")
    cmd += [str(cc), *map(str, objects), "-o", str(out),
            f"-L{Path(tools.tvm_ffi_lib).parent}", "-ltvm_ffi", "-ldl", "-Wl,-Bsymbolic"]
    if cuda:
        cmd += [tools.cudart_static, "-Wl,--exclude-libs,ALL", "-lpthread", "-ldl", "-lrt"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise NativeBuildError(f"compiling the native library failed ({' '.join(cmd)}):\n"
                               f"{result.stderr[-4000:]}")


@dataclass(frozen=True)
class NativeLibraryResult:
    path: Path
    cuda: bool
    cpu: bool
    skipped: tuple[_Skipped, ...]
    warnings: tuple[str, ...]


def write_native_library(root: str | os.PathLike, *, cpu: bool = True) -> NativeLibraryResult:
    """Generate and compile ``root``'s native library from its manifest (under the directory's
    manifest lock, so concurrent builds into one directory do not interleave)."""
    root = Path(root)
    tools = find_toolchain()
    warnings = []
    with _LOCK, open(root / ".manifest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest_bytes = (root / MANIFEST_NAME).read_bytes()
        manifest = json.loads(manifest_bytes)
        if manifest.get("builds") and not tools.cuda_include:  # a CPU-only directory needs no CUDA
            warnings.append(MISSING_CUDA)
        target = root / library_name(manifest_bytes)
        digest = hashlib.sha1(manifest_bytes).hexdigest()[:12]
        configs = sorted({OpConfig(b["key_dim"], b["num_heads"], b["dtype"])
                          for b in (*manifest["builds"], *manifest.get("cpu_libraries", ()))},
                         key=lambda c: c.tag)
        with tempfile.TemporaryDirectory(prefix="psa_native_") as tmp:
            work = Path(tmp)
            objects: list[Path] = []
            cpu_objects: dict[OpConfig, dict] = {}
            if cpu and configs:
                try:
                    cpu_objects = compile_cpu_object(configs, work / "cpu.o")
                    # The kernels' parallel loops call through __TVMBackendParallelLaunch:
                    # cpu_pool.cc fills it (tvm_ffi alone does not).
                    objects += [work / "cpu.o", CPU_POOL_SOURCE]
                    if lines_object_path(work / "cpu.o").is_file():
                        objects.append(lines_object_path(work / "cpu.o"))
                except ImportError as err:
                    warnings.append(f"no CPU kernels in the native library: TVM is needed to "
                                    f"build them ({err})")
            source, skipped = generate_source(root, manifest, cpu_objects, digest)
            tmp_out = work / target.name
            compile_library(source, tmp_out, tools, objects, work)
            (root / ".native").mkdir(exist_ok=True)
            (root / ".native" / "psa_native.cc").write_text(source)  # for inspection
            shutil.copyfile(tmp_out, root / f".{target.name}.tmp")
            os.replace(root / f".{target.name}.tmp", target)
        pointer = root / f".{POINTER_NAME}.tmp"
        pointer.write_text(json.dumps({"library": target.name, "manifest_sha1": digest}))
        os.replace(pointer, root / POINTER_NAME)
        for old in root.glob(f"{LIBRARY_PREFIX}*.so"):
            if old != target:  # a process that loaded it keeps its mapping
                old.unlink(missing_ok=True)
    return NativeLibraryResult(target, tools.cuda_include is not None, bool(cpu_objects),
                               tuple(skipped), tuple(warnings))


def native_info(result: NativeLibraryResult) -> dict[str, Any]:
    return {"path": str(result.path), "cuda": result.cuda, "cpu": result.cpu,
            "skipped": [s.__dict__ for s in result.skipped], "warnings": list(result.warnings)}
