"""Reading an artifact directory's manifest: kernels, their parameters and launch expressions.

This module is part of the run-time half: it imports no TVM. The expressions in the manifest
(``"NV + 31 >> 5"``, ``"B * T.int64(8)"``) are TVMScript as TVM printed them; their operators
have Python's meaning and precedence (``//`` and ``%`` are floor operations in both), so a small
whitelisting evaluator computes them for concrete shapes.
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from psa_tvm.config import OpConfig
from psa_tvm.errors import ArtifactNotFoundError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.RShift: operator.rshift, ast.LShift: operator.lshift}
_CASTS = {"int32", "int64"}


def _truncdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


# min/max; TIR's truncating division (C's / and %): a floor division by a constant that is not
# a power of two prints as ``T.Div(x, c) + (T.truncmod(x, c) >> 31)`` (a tile of 80 positions).
_FUNCS = {"min": min, "max": max, "Div": _truncdiv, "truncdiv": _truncdiv,
          "truncmod": lambda a, b: a - b * _truncdiv(a, b)}


def kernel_symbol(pass_: str, schedule: str, vec: int, index_dtype: str,
                  vec_kd: int | None = None, op: str = "merge", shifted: bool = False,
                  small: bool = False, whole: bool = False,
                  n_range: tuple[int, int] | None = None, band: int = 0,
                  band_threads: int = 0) -> str:
    """Global symbol of one kernel variant; TVM appends ``_kernel`` for the device entry.

    ``vec`` is the width along N, ``vec_kd`` the width along kd, named only where it differs
    (``psa_merge_fwd_tiled_v2k8_i32``), so symbols of equal widths read as before. ``op`` is the
    op of the layout family (``merge``, or a pack/stream op of psa_tvm/layouts.py). A shifted
    kernel (16-byte N-side vectors for any N, psa_tvm/compiler/shifted.py) is ``s{vec_kd}``,
    the second, small-call shifted backward of a split build ``s{vec_kd}small`` and the
    whole-row one (by ``N``) ``s{vec_kd}whole``. A plain kernel for a range of ``N`` (a tiled
    build's ``range_*`` params) appends ``n{first}to{last}``: ``psa_merge_fwd_tiled_v8n1024to2048
    _i32``; so does a band kernel of ``band`` rows at ``band_threads`` threads a CTA
    (psa_tvm/compiler/band.py), named ``band{rows}x{threads}``:
    ``psa_merge_fwd_tiled_band16x256n897to960_i32`` (one ``N`` range may hold band kernels for
    different call sizes).
    """
    short = {"forward": "fwd", "backward": "bwd"}[pass_]
    widths = f"v{vec}" if vec_kd in (None, vec) else f"v{vec}k{vec_kd}"
    extra = "small" if small else "whole" if whole else ""
    widths = (f"s{vec_kd}{extra}" if shifted else f"band{band}x{band_threads}" if band
              else widths)
    if n_range is not None:
        widths += f"n{n_range[0]}to{n_range[1]}"
    return f"psa_{op}_{short}_{schedule}_{widths}_{'i64' if index_dtype == 'int64' else 'i32'}"


@lru_cache(maxsize=512)
def _parse(expr: str) -> ast.expr:
    tree = ast.parse(expr, mode="eval").body
    for node in ast.walk(tree):
        allowed = (ast.BinOp, ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Load,
                   *_BINOPS)
        if not isinstance(node, allowed):
            raise ValueError(f"unsupported launch expression {expr!r}")
    return tree


def _eval(node: ast.expr, env: dict[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "Cast":  # T.Cast("int64", x)
            return _eval(node.args[-1], env)
        args = [_eval(a, env) for a in node.args]
        if name in _CASTS:  # T.int64(8)
            return args[0]
        if name in _FUNCS:  # min/max, bare or as T.min/T.max; T.Div, T.truncmod
            return _FUNCS[name](*args)
    raise ValueError(f"unsupported launch expression node {ast.dump(node)}")


def evaluate(expr: str, symbols: dict[str, int]) -> int:
    """Value of a manifest expression for concrete ``symbols``."""
    return int(_eval(_parse(expr), symbols))


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter, in launch order: a data pointer of a tensor, or a shape symbol."""

    name: str  # as in the CUDA signature, e.g. ``lo_ptr`` or ``NV``
    kind: str  # "ptr", "int32", "int64" or "float32"
    tensor: str | None = None  # for pointers: the buffer, e.g. "lo"
    symbol: str | None = None  # for scalars: the shape symbol, e.g. "NV"

    @classmethod
    def from_json(cls, data: dict) -> KernelParam:
        return cls(name=data["name"], kind=data["type"], tensor=data.get("tensor"),
                   symbol=data.get("symbol"))


@dataclass(frozen=True)
class SymbolBinding:
    """Where a shape symbol is read: ``shape(tensor)[axis] == symbol * divisor``."""

    tensor: str
    axis: int
    divisor: int

    @classmethod
    def from_json(cls, data: dict) -> SymbolBinding:
        return cls(tensor=data["tensor"], axis=data["axis"], divisor=data["divisor"])


@dataclass(frozen=True)
class KernelSpec:
    """One compiled kernel and its launch contract, as recorded in the manifest.

    ``vec`` is the vector width on the side contiguous along ``N`` (the kernel needs
    ``N % vec == 0``); ``vec_kd`` the width on the side contiguous along ``key_dim``. ``rank``
    orders kernels of equal ``vec_kd`` at launch: ``2 * vec``, except a shifted kernel (any
    ``N``, 16-byte N-side vectors), which the manifest ranks between an 8- and a 4-byte N side.
    A kernel may have two records (a shifted backward whose build sets ``bwd_aligned``: also the
    full ``vec`` with a rank above the plain 16-byte kernel's), one per place in that order.
    Among kernels of equal rank the one with the larger ``min_numel`` comes first where a call
    reaches it (a split shifted backward: the main kernel for large calls, the small-tile one
    below). A kernel with an ``N`` range (``max_n`` > 0: it runs only for
    ``min_n <= N <= max_n``, a whole-row shifted backward) comes before the kernels of its rank
    without one, wherever ``N`` is in range.
    A band kernel (``band`` > 0, compiler/band.py) ranks above every other kernel and runs
    only in its ``N`` range, from its ``min_numel`` and up to its ``max_numel`` (0: any size);
    the band kernels of one range split the call sizes between them.
    """

    pass_: str
    vec: int
    vec_kd: int
    index_dtype: str
    entry: str
    params: tuple[KernelParam, ...]
    grid: tuple[str, str, str]
    block: tuple[str, str, str]
    dynamic_smem_bytes: int
    symbols: dict[str, SymbolBinding]
    resources: dict[str, dict]
    rank: int = 0
    shifted: bool = False
    band: int = 0  # > 0: a band kernel of this many rows (compiler/band.py), any N in range
    min_numel: int = 0  # the kernel runs only for calls of at least this many merged elements
    max_numel: int = 0  # > 0: the kernel runs only for calls of at most this many elements
    min_n: int = 0  # with max_n > 0: the kernel runs only for min_n <= N <= max_n
    max_n: int = 0  # 0: any N

    @classmethod
    def from_json(cls, data: dict) -> KernelSpec:
        return cls(pass_=data["pass"], vec=data["vec"], vec_kd=data.get("vec_kd", data["vec"]),
                   rank=data.get("rank", 2 * data["vec"]), shifted=data.get("shifted", False),
                   band=data.get("band", 0),
                   min_numel=data.get("min_numel", 0), max_numel=data.get("max_numel", 0),
                   min_n=data.get("min_n", 0),
                   max_n=data.get("max_n", 0),
                   index_dtype=data["index_dtype"], entry=data["entry"],
                   params=tuple(KernelParam.from_json(p) for p in data["params"]),
                   grid=tuple(data["grid"]), block=tuple(data["block"]),
                   dynamic_smem_bytes=data["dynamic_smem_bytes"],
                   symbols={k: SymbolBinding.from_json(v) for k, v in data["symbols"].items()},
                   resources=data.get("resources", {}))

    def runs_at(self, n: int) -> bool:
        """Whether ``N`` is in the kernel's range (every ``N`` without one)."""
        return not self.max_n or self.min_n <= n <= self.max_n

    def runs_for(self, numel: int) -> bool:
        """Whether a call of ``numel`` merged elements is in the kernel's size range."""
        return numel >= self.min_numel and (not self.max_numel or numel <= self.max_numel)

    @property
    def alignment_elements(self) -> int:
        """Every data pointer must be aligned to this many elements to run this kernel."""
        return max(self.vec, self.vec_kd)

    def bind_symbols(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
        """Shape symbols (``B``, ``NV``) from the concrete shapes of the kernel's tensors."""
        return {name: shapes[b.tensor][b.axis] // b.divisor for name, b in self.symbols.items()}

    def launch_dims(self, symbols: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        grid = tuple(evaluate(e, symbols) for e in self.grid)
        block = tuple(evaluate(e, symbols) for e in self.block)
        return grid, block


@dataclass(frozen=True)
class BinarySpec:
    """One device binary of a build: a fatbin (several archs + PTX) or a single-arch cubin."""

    path: Path
    format: str
    archs: tuple[str, ...]
    ptx: tuple[str, ...]

    @classmethod
    def from_json(cls, root: Path, data: dict) -> BinarySpec:
        return cls(path=root / data["path"], format=data["format"], archs=tuple(data["archs"]),
                   ptx=tuple(data["ptx"]))


@dataclass(frozen=True)
class BuildSpec:
    """One build of the manifest: a config, a schedule with its parameters, its kernels."""

    root: Path
    config: OpConfig
    schedule: str
    schedule_params: dict[str, Any]
    vector_width: int
    preferred: bool
    archs: tuple[str, ...]
    source: Path
    binaries: tuple[BinarySpec, ...]
    kernels: tuple[KernelSpec, ...]
    op: str = "merge"  # the merge, or a member of the attention layout family
    # What the build's shifted kernels were built with (compiler/shifted.py's ShiftedParams).
    shifted_params: dict[str, int] | None = None
    # Passes scheduled with params of their own (a family op's scatter): pass -> params.
    pass_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Built without explicit params (what an untuned call runs), and the newest such build of
    # its (config, op, schedule) in the directory: older ones lose the flag when it is written.
    default: bool = False
    # Digest of the compiler that built it (compiler/artifact.py's DEFINITION_DIGEST; None: a
    # build from before v37 recorded none). The on-demand cache runs only its own compiler's.
    definition: str | None = None

    def params_for(self, pass_: str) -> dict[str, Any]:
        """The schedule params ``pass_``'s kernels were built with."""
        return self.pass_params.get(pass_, self.schedule_params)

    @classmethod
    def from_json(cls, root: Path, data: dict) -> BuildSpec:
        return cls(
            root=root,
            config=OpConfig(data["key_dim"], data["num_heads"], data["dtype"]),
            schedule=data["schedule"], schedule_params=data["schedule_params"],
            vector_width=data["vector_width"], preferred=data.get("preferred", True),
            archs=tuple(data["archs"]), source=root / data["source"],
            binaries=tuple(BinarySpec.from_json(root, b) for b in data["binaries"]),
            kernels=tuple(KernelSpec.from_json(k) for k in data["kernels"]),
            op=data.get("op", "merge"), shifted_params=data.get("shifted_params"),
            pass_params=data.get("pass_params", {}), default=data.get("default", False),
            definition=data.get("definition"),
        )

    def kernel(self, pass_: str, vec: int, index_dtype: str) -> KernelSpec:
        for spec in self.kernels:
            if (spec.pass_, spec.vec, spec.index_dtype) == (pass_, vec, index_dtype):
                return spec
        raise ArtifactNotFoundError(
            f"{self.source.name}: no {pass_} kernel with vec={vec}, {index_dtype}")

    def binary_for(self, arch: str) -> BinarySpec:
        """The binary to load on a GPU of ``arch`` (``sm_86``): SASS of the same major version
        and no newer minor (binary compatible), else PTX no newer than the GPU (JIT)."""
        major_minor = int(arch.removeprefix("sm_").rstrip("a"))
        for binary in self.binaries:
            sass = [int(a.removeprefix("sm_").rstrip("a")) for a in binary.archs]
            if any(s // 10 == major_minor // 10 and s <= major_minor for s in sass):
                return binary
        for binary in self.binaries:
            ptx = [int(p.removeprefix("compute_").rstrip("a")) for p in binary.ptx]
            if any(version <= major_minor for version in ptx):
                return binary
        raise ArtifactNotFoundError(
            f"{self.source.name} was built for {list(self.archs)}; nothing runs on {arch}: "
            f"rebuild with --arch {arch}"
        )


@dataclass(frozen=True)
class CpuLibrarySpec:
    """The CPU (LLVM) build of one configuration: a TVM-FFI shared library with both passes."""

    config: OpConfig
    path: Path
    target: str
    definition: str  # digest of the TensorIR and CPU schedule that built it
    forward_vec: int = 1  # > 1: also a forward kernel for N % forward_vec == 0
    pairs_forward_vec: int = 0  # > 0: a 16-bit forward kernel on 32-bit words, N % (2*vec) == 0
    pairs_backward: bool = False  # a 16-bit backward kernel on 32-bit words, N even
    prefetch: bool = False  # both generic kernels again, prefetching each slice first
    lines: bool = False  # the aligned-line forward (x86-64-v4), where the CPU has it

    @classmethod
    def from_json(cls, root: Path, data: dict) -> CpuLibrarySpec:
        return cls(config=OpConfig(data["key_dim"], data["num_heads"], data["dtype"]),
                   path=root / data["path"], target=data["target"],
                   definition=data["definition"], forward_vec=data.get("forward_vec", 1),
                   pairs_forward_vec=data.get("pairs_forward_vec", 0),
                   pairs_backward=data.get("pairs_backward", False),
                   prefetch=data.get("prefetch", False), lines=data.get("lines", False))


@dataclass(frozen=True)
class Manifest:
    """An artifact directory's manifest."""

    root: Path
    psa_tvm_version: str
    tvm_version: str
    builds: tuple[BuildSpec, ...]
    cpu_libraries: tuple[CpuLibrarySpec, ...] = ()

    @classmethod
    def load(cls, root: str | Path) -> Manifest:
        """Read ``root/manifest.json`` (parsed once per file version)."""
        root = Path(root)
        path = root / MANIFEST_NAME
        if not path.is_file():
            raise ArtifactNotFoundError(
                f"artifacts: no {MANIFEST_NAME} in {root}; build one with `psa-tvm build -o "
                f"{root}` (needs `pip install 'psa-tvm[compiler]'` and nvcc) or point "
                "PSA_TVM_ARTIFACTS at a directory built elsewhere")
        stat = path.stat()
        return _load(root, stat.st_mtime_ns, stat.st_size)

    @classmethod
    def _parse(cls, root: Path) -> Manifest:
        path = root / MANIFEST_NAME
        data = json.loads(path.read_text())
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"{path}: manifest format {data.get('format')}, "
                             f"this psa-tvm reads {MANIFEST_FORMAT}")
        return cls(root=root, psa_tvm_version=data["psa_tvm_version"],
                   tvm_version=data["tvm_version"],
                   builds=tuple(BuildSpec.from_json(root, b) for b in data["builds"]),
                   cpu_libraries=tuple(CpuLibrarySpec.from_json(root, c)
                                       for c in data.get("cpu_libraries", ())))

    def find_cpu(self, config: OpConfig) -> CpuLibrarySpec:
        """The CPU library of ``config``."""
        for library in self.cpu_libraries:
            if library.config == config:
                return library
        raise ArtifactNotFoundError(
            f"artifacts in {self.root} have no CPU library for {config.tag}; run `psa-tvm "
            f"build --target cpu --key-dim {config.key_dim} --num-heads {config.num_heads} "
            f"--dtype {config.dtype} -o {self.root}`")

    def find(self, config: OpConfig, schedule: str,
             params: dict[str, Any] | None = None, op: str = "merge",
             shifted_params: dict[str, int] | None = None,
             definition: str | None = None) -> BuildSpec:
        """The build of ``config`` with ``schedule``: with ``params`` if given and built, else
        the newest default build (built without explicit params; a directory rebuilt after the
        defaults changed also holds older ones), else a preferred one. Among equal candidates
        the one built with ``shifted_params`` (a tuned table's) first. With ``definition``, only
        the builds of that compiler (:attr:`BuildSpec.definition`) count."""
        matches = [b for b in self.builds
                   if b.config == config and b.schedule == schedule and b.op == op
                   and definition in (None, b.definition)]
        if shifted_params is not None:  # stable: the order of the manifest otherwise
            matches.sort(key=lambda b: b.shifted_params != shifted_params)
        if params is not None:
            exact = [b for b in matches if b.schedule_params == params]
            if exact:
                return exact[0]
        for chosen in ([b for b in matches if b.default], [b for b in matches if b.preferred]):
            if chosen:
                return chosen[0]
        if matches:
            return matches[0]
        if definition is not None:
            raise ArtifactNotFoundError(
                f"artifacts in {self.root} have no {schedule!r} build for {config.tag} by this "
                f"compiler (definition {definition})")
        have = sorted({f"{b.config.tag}/{b.schedule}" for b in self.builds})
        listed = ", ".join(have[:6]) + (f", ... ({len(have)} in all)" if len(have) > 6 else "")
        raise ArtifactNotFoundError(
            f"artifacts in {self.root} have no {schedule!r} build for {config.tag} "
            f"(have {listed or 'none'}); run `psa-tvm build --key-dim {config.key_dim} "
            f"--num-heads {config.num_heads} --dtype {config.dtype} --schedule {schedule}`"
        )


@lru_cache(maxsize=8)
def _load(root: Path, mtime_ns: int, size: int) -> Manifest:
    return Manifest._parse(root)
