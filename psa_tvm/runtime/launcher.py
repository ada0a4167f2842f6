"""Launch prebuilt kernels through the CUDA driver API (NVIDIA's cuda-python). No TVM.

:class:`CudaLauncher` knows nothing about the op: it loads a binary into the primary context of a
device, looks up an entry point, and launches it with a grid, a block and a packed argument
list. :class:`PreparedLaunch` is one validated :class:`~psa_tvm.runtime.plan.LaunchPlan` bound
to a loaded kernel, whose arguments are packed once; only the data pointers change per call.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psa_tvm.runtime.plan import LaunchPlan
    from psa_tvm.runtime.tensors import TensorInfo

_CTYPES = {"ptr": ctypes.c_void_p, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "float32": ctypes.c_float}


class CudaError(RuntimeError):
    """A CUDA driver call failed."""


#: Dynamic shared memory a kernel may take without opting in (CUDA's default limit).
DEFAULT_DYNAMIC_SMEM_BYTES = 48 * 1024


_DRIVER = None


def _driver():
    global _DRIVER
    if _DRIVER is None:
        try:
            from cuda.bindings import driver
        except ImportError as err:
            raise ImportError("launching psa-tvm kernels needs NVIDIA's cuda-python: "
                              "pip install cuda-python") from err
        _DRIVER = driver
    return _DRIVER


def check(result: tuple, call: str) -> Any:
    """Unpack a cuda-python result tuple, raising :class:`CudaError` on any error code."""
    driver = _DRIVER or _driver()
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        raise CudaError(f"{call} failed: {name.decode() if name else err}: "
                        f"{text.decode() if text else ''}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def cuda_available() -> bool:
    """True when the driver loads and reports at least one device."""
    try:
        driver = _driver()
        check(driver.cuInit(0), "cuInit")
        return check(driver.cuDeviceGetCount(), "cuDeviceGetCount") > 0
    except Exception:
        return False


def device_arch(device_index: int = 0) -> str:
    """``sm_XY`` of a device, from its compute capability."""
    driver = _driver()
    check(driver.cuInit(0), "cuInit")
    device = check(driver.cuDeviceGet(device_index), "cuDeviceGet")
    attr = driver.CUdevice_attribute
    major = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                              device), "cuDeviceGetAttribute")
    minor = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                              device), "cuDeviceGetAttribute")
    return f"sm_{major}{minor}"


class PackedArgs:
    """Kernel arguments as the ``void**`` array ``cuLaunchKernel`` expects."""

    __slots__ = ("_array", "_values")

    def __init__(self, values: list[tuple[str, int | float]]):
        self._values = [_CTYPES[kind](value) for kind, value in values]
        self._array = (ctypes.c_void_p * len(self._values))(
            *[ctypes.addressof(v) for v in self._values]
        )

    def set(self, index: int, value: int | float) -> None:
        self._values[index].value = value

    @property
    def address(self) -> int:
        return ctypes.addressof(self._array)


class CudaLauncher:
    """Loads binaries per device (primary context) and launches their kernels."""

    def __init__(self) -> None:
        self._driver = _driver()
        check(self._driver.cuInit(0), "cuInit")
        self._lock = threading.Lock()
        self._contexts: dict[int, Any] = {}
        self._context_handles: dict[int, int] = {}
        self._modules: dict[tuple[int, Path], Any] = {}  # (device, binary path)
        self._functions: dict[tuple[int, Path, str], Any] = {}
        self._archs: dict[int, str] = {}

    def arch(self, device_index: int) -> str:
        """``sm_XY`` of the device, cached."""
        arch = self._archs.get(device_index)
        if arch is None:
            arch = self._archs[device_index] = device_arch(device_index)
        return arch

    def _context(self, device_index: int):
        ctx = self._contexts.get(device_index)
        if ctx is None:
            device = check(self._driver.cuDeviceGet(device_index), "cuDeviceGet")
            ctx = check(self._driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
            self._contexts[device_index] = ctx
            self._context_handles[device_index] = int(ctx)
        return ctx

    def function(self, binary: Path, entry: str, device_index: int, shared_bytes: int = 0):
        """The ``CUfunction`` for ``entry`` in ``binary``, loaded on ``device_index`` once.

        A kernel launched with more than 48 KB of dynamic shared memory (``shared_bytes``,
        the manifest's ``dynamic_smem_bytes``) is opted in to it here, once, as CUDA asks."""
        key = (device_index, binary, entry)
        func = self._functions.get(key)
        if func is not None:
            return func
        with self._lock, self.current(device_index):
            module = self._modules.get((device_index, binary))
            if module is None:
                image = Path(binary).read_bytes()
                module = check(self._driver.cuModuleLoadData(image), f"cuModuleLoadData({binary})")
                self._modules[(device_index, binary)] = module
            func = check(self._driver.cuModuleGetFunction(module, entry.encode()),
                         f"cuModuleGetFunction({entry})")
            if shared_bytes > DEFAULT_DYNAMIC_SMEM_BYTES:
                attribute = self._driver.CUfunction_attribute
                check(self._driver.cuFuncSetAttribute(
                    func, attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes), f"cuFuncSetAttribute({entry}, {shared_bytes} bytes of "
                    "dynamic shared memory)")
            self._functions[key] = func
        return func

    def current(self, device_index: int) -> _CurrentContext:
        """Context manager making the device's primary context current, restoring the old one."""
        return _CurrentContext(self._driver, self._context(device_index))

    def launch(self, func, grid: tuple[int, ...], block: tuple[int, ...], shared_bytes: int,
               stream: int, args: PackedArgs, device_index: int) -> None:
        """Launch ``func`` on ``stream`` (a raw ``CUstream`` handle, 0 for the legacy stream)."""
        ctx = self._context_handles.get(device_index) or int(self._context(device_index))
        current = check(self._driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) == ctx:  # the usual case: torch made this device current
            self._launch(func, grid, block, shared_bytes, stream, args)
            return
        with self.current(device_index):
            self._launch(func, grid, block, shared_bytes, stream, args)

    def _launch(self, func, grid, block, shared_bytes, stream, args: PackedArgs) -> None:
        check(self._driver.cuLaunchKernel(func, *grid, *block, shared_bytes, stream,
                                          args.address, 0), "cuLaunchKernel")


class _CurrentContext:
    __slots__ = ("_ctx", "_driver", "_previous")

    def __init__(self, driver, ctx) -> None:
        self._driver, self._ctx, self._previous = driver, ctx, None

    def __enter__(self) -> None:
        current = check(self._driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) != int(self._ctx):
            self._previous = current
            check(self._driver.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            check(self._driver.cuCtxSetCurrent(self._previous), "cuCtxSetCurrent")
            self._previous = None


_SHARED: CudaLauncher | None = None


def shared_launcher() -> CudaLauncher:
    """The process-wide launcher (modules are loaded once per device)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = CudaLauncher()
    return _SHARED


class PreparedLaunch:
    """A validated launch: kernel loaded, arguments pre-packed; only pointers change per call."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.empty = plan.empty
        self.device_index = plan.device_index
        self.pointer_slots = [(i, p.tensor) for i, p in enumerate(plan.kernel.params)
                              if p.kind == "ptr"]
        self.args = PackedArgs([(kind, value) for kind, _, value in plan.args])
        self.launcher = shared_launcher()
        if not self.empty:
            binary = plan.build.binary_for(self.launcher.arch(plan.device_index))
            self.func = self.launcher.function(binary.path, plan.kernel.entry, plan.device_index,
                                               plan.shared_bytes)
        self.lock = threading.Lock()

    def __call__(self, infos: dict[str, TensorInfo], stream: int) -> None:
        if self.empty:
            return  # zero-sized tensors: nothing to move, and an empty grid is no valid launch
        with self.lock:  # the packed argument buffer is shared by threads using this launch
            for slot, tensor in self.pointer_slots:
                self.args.set(slot, infos[tensor].ptr)
            self.launcher.launch(self.func, self.plan.grid, self.plan.block,
                                 self.plan.shared_bytes, stream, self.args, self.device_index)
