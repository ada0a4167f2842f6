"""Lower scheduled PrimFuncs to CUDA source and read each kernel's launch contract off the IR.

Everything the run-time half needs to launch a kernel without TVM -- entry name, parameter order
and meaning, grid/block expressions over the shape symbols, shared memory -- is read from the
lowered device functions here, never typed by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import PointerType
from tvm.tirx import PrimFunc
from tvm.tirx.build import codegen_build, split_host_device_mods

_THREAD_TAGS = tuple(f"{kind}.{axis}" for kind in ("blockIdx", "threadIdx") for axis in "xyz")
# CommonSubexprElim would hoist host-computable expressions into extra kernel parameters
# (cse_vN) whose meaning the manifest would then have to carry; we keep the signature plain.
_PASS_CONFIG = {"tirx.disable_cse_tir": True}


@dataclass(frozen=True)
class LoweredModule:
    """CUDA source of a module and the launch contract of each of its kernels."""

    source: str
    kernels: dict[str, dict]  # global symbol of the PrimFunc -> manifest entry


def cuda_target(arch: str = "sm_90") -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")


def _symbol_bindings(func: PrimFunc) -> dict[str, dict]:
    """For each shape symbol, a tensor axis holding it: ``shape[axis] == sym * divisor``."""
    bindings: dict[str, dict] = {}
    for param in func.params:
        if not hasattr(param.ty, "shape"):
            continue
        for axis, extent in enumerate(param.ty.shape):
            if isinstance(extent, tirx.Var):
                var, divisor = extent, 1
            elif isinstance(extent, tirx.Mul) and isinstance(extent.a, tirx.Var) \
                    and isinstance(extent.b, tirx.IntImm):
                var, divisor = extent.a, int(extent.b.value)
            else:
                continue
            known = bindings.get(var.name)
            if known is None or (known["divisor"] != 1 and divisor == 1):
                bindings[var.name] = {"tensor": param.name, "axis": axis, "divisor": divisor}
    return bindings


def _launch_extents(kernel: PrimFunc) -> dict[str, tirx.PrimExpr]:
    extents: dict[str, tirx.PrimExpr] = {}

    def visit(stmt) -> bool:
        if stmt.attr_key == "thread_extent":
            extents[stmt.node.var.name] = stmt.value
        return True

    tvm_ffi.structural_walk(kernel.body, (tirx.AttrStmt, visit))
    return extents


def _shared_bytes(kernel: PrimFunc) -> tuple[int, int]:
    """(static, dynamic) shared memory bytes of the kernel's allocations."""
    sizes = {"shared": 0, "shared.dyn": 0}

    def visit(node) -> bool:
        scope = node.buffer.scope()
        if scope in sizes:
            count = 1
            for extent in node.buffer.shape:
                count *= int(extent)
            sizes[scope] += count * tvm.runtime.DataType(node.buffer.dtype).itemsize
        return True

    tvm_ffi.structural_walk(kernel.body, (tirx.AllocBuffer, visit))
    return sizes["shared"], sizes["shared.dyn"]


def _kernel_entry(symbol: str, scheduled: PrimFunc, kernel: PrimFunc) -> dict:
    buffers = {p.name: p for p in scheduled.params if hasattr(p.ty, "shape")}
    bindings = _symbol_bindings(scheduled)
    params = []
    for param in kernel.params:
        if isinstance(param.ty, PointerType):
            # A hand-written kernel may address a tensor through a flat view named
            # ``<tensor>_flat`` (compiler/shifted.py); its pointer is still that tensor's.
            tensor = param.name.removesuffix("_ptr").removesuffix("_flat")
            if tensor not in buffers:
                raise RuntimeError(f"{symbol}: pointer parameter {param.name} matches no tensor")
            params.append({"name": param.name, "type": "ptr", "tensor": tensor})
        else:
            if param.name not in bindings:
                raise RuntimeError(
                    f"{symbol}: kernel parameter {param.name} is no shape symbol; "
                    "the launcher could not compute it"
                )
            params.append({"name": param.name, "type": str(param.ty.dtype), "symbol": param.name})
    extents = _launch_extents(kernel)
    unknown = set(extents) - set(_THREAD_TAGS)
    if unknown:
        raise RuntimeError(f"{symbol}: unexpected launch tags {sorted(unknown)}")
    static_smem, dynamic_smem = _shared_bytes(kernel)
    return {
        "entry": str(kernel.attrs["global_symbol"]),
        "params": params,
        "grid": [str(extents.get(f"blockIdx.{a}", 1)) for a in "xyz"],
        "block": [str(extents.get(f"threadIdx.{a}", 1)) for a in "xyz"],
        "static_smem_bytes": static_smem,
        "dynamic_smem_bytes": dynamic_smem,
        "symbols": {name: bindings[name] for name in bindings},
        "tensors": {
            name: [str(extent) for extent in buf.ty.shape] for name, buf in buffers.items()
        },
    }


def lower_cuda(funcs: dict[str, PrimFunc], arch: str = "sm_90") -> LoweredModule:
    """Lower scheduled ``funcs`` (by global symbol) to one CUDA source with their contracts."""
    target = cuda_target(arch)
    mod = tvm.IRModule(dict(funcs))
    pipeline, _, finalize_device = tirx.get_tir_pipeline("s_tir")
    with tvm.transform.PassContext(config=_PASS_CONFIG):
        lowered = pipeline(tirx.transform.BindTarget(target)(mod))
        _, device_mods = split_host_device_mods(lowered)
        ((device_target, device_mod),) = device_mods.items()
        device_mod = finalize_device()(device_mod)
        source = codegen_build(device_mod, device_target).inspect_source()
    kernels = {}
    for symbol, scheduled in funcs.items():
        names = [gv.name_hint for gv in device_mod.get_global_vars()
                 if gv.name_hint == f"{symbol}_kernel"]
        if len(names) != 1:
            raise RuntimeError(f"{symbol}: expected one device kernel, found {names}")
        kernels[symbol] = _kernel_entry(symbol, scheduled, device_mod[names[0]])
    return LoweredModule(source=source, kernels=kernels)
