"""Thin helpers over ``cuda.bindings.driver``.

Checked calls that raise a readable CudaDriverError; one driver initialisation per
process; device facts cached per device; the device's primary context (the one torch
uses) made current for a block of calls, the caller's context restored after;
cuModuleLoadData once per (context, cubin sha256); cuModuleGetFunction plus the dynamic
shared memory attribute once per loaded function.

The primary context is asked for (cuCtxGetCurrent) only until this thread has seen it
current while torch's current device was the call's: from then on, while torch's current
device stays that device (torch switches contexts only by switching devices), it is taken
as current without a driver call. Code that makes another context of the same device
current through the driver API, behind torch's back, is not noticed: the driver then
refuses dglu's launches (their functions belong to the primary context).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

from .contract.records import Record
from .errors import CudaDriverError

_lock = threading.Lock()
_modules: dict[tuple[int, str], Any] = {}
_functions: dict[tuple[int, str], Any] = {}


@functools.cache
def cuda_driver() -> Any:
    """cuda.bindings.driver, imported on first use (importing dglu stays cheap)."""
    from cuda.bindings import driver

    return driver


def _error_name_and_text(driver: Any, error: Any) -> tuple[str, str]:
    _, name = driver.cuGetErrorName(error)
    _, text = driver.cuGetErrorString(error)
    return name.decode(), text.decode()


_bound: dict[str, Callable[..., Any]] = {}  # function name -> cuda.bindings.driver's function


def checked(function_name: str, *args: Any) -> Any:
    """Call ``cuda.bindings.driver.<function_name>``; raise on failure, return its value(s)."""
    function = _bound.get(function_name)
    if function is None:  # looked up once per name (a launch's hit path makes two calls)
        function = _bound[function_name] = getattr(cuda_driver(), function_name)
    result = function(*args)
    if result[0]:  # CUDA_SUCCESS is 0
        name, text = _error_name_and_text(cuda_driver(), result[0])
        raise CudaDriverError(f"{function_name} failed: {name} ({text})", name)
    if len(result) < 3:
        return result[1] if len(result) == 2 else None
    return result[1:]


@functools.cache
def initialize() -> None:
    """cuInit once per process; missing bindings or driver library become a CudaDriverError."""
    try:
        checked("cuInit", 0)
    except CudaDriverError:
        raise
    except ImportError as exc:
        raise CudaDriverError(f"cuda-bindings is not installed: {exc}") from exc
    except RuntimeError as exc:  # cuda.pathfinder's DynamicLibNotFoundError: no libcuda
        raise CudaDriverError(f"no usable CUDA driver: {exc}") from exc


def device_count() -> int:
    """Number of CUDA devices the driver sees."""
    initialize()
    return checked("cuDeviceGetCount")


@functools.cache
def driver_version() -> int:
    """The CUDA driver's version as cuDriverGetVersion reports it (1000 * major + 10 * minor)."""
    initialize()
    return checked("cuDriverGetVersion")


class DeviceInfo(Record):
    """Facts about one device that selection and launch need."""

    ordinal: int
    name: str
    capability: tuple[int, int]
    sm_count: int
    max_dynamic_smem_bytes: int


@functools.cache
def device_info(ordinal: int) -> DeviceInfo:
    """Name, compute capability, SM count and opt-in shared memory of a device (cached)."""
    initialize()
    driver = cuda_driver()
    device = checked("cuDeviceGet", ordinal)
    attribute = driver.CUdevice_attribute

    def get(name: str) -> int:
        return checked("cuDeviceGetAttribute", getattr(attribute, name), device)

    raw_name = checked("cuDeviceGetName", 256, device)
    return DeviceInfo(
        ordinal=ordinal,
        name=raw_name.split(b"\0", 1)[0].decode(),
        capability=(
            get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
        ),
        sm_count=get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        max_dynamic_smem_bytes=get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
    )


@functools.cache
def primary_context(ordinal: int) -> Any:
    """The device's primary context (the one torch uses), retained once per process."""
    initialize()
    return checked("cuDevicePrimaryCtxRetain", checked("cuDeviceGet", ordinal))


NO_DEVICE = -1  # torch_current_device's answer until torch has initialised CUDA


_torch_get_device: list[Callable[[], int]] = []  # torch's, once torch has initialised CUDA


def torch_current_device() -> int:
    """torch's current CUDA device on this thread (NO_DEVICE until torch initialised CUDA)."""
    if not _torch_get_device:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return NO_DEVICE
        _torch_get_device.append(torch._C._cuda_getDevice)
    return _torch_get_device[0]()


_seen = threading.local()  # .device: this thread saw that device's primary context current


def device_context(ordinal: int) -> ContextBlock | AlreadyCurrent:
    """A block (``with device_context(0) as context:``) inside which the device's primary
    context is current, the previous one after it. No driver call while torch's current
    device is one whose primary context this thread has seen current (see the module
    docstring): the fast path of every call, so a function returning a ready object."""
    torch_device = torch_current_device()
    if torch_device == ordinal == getattr(_seen, "device", NO_DEVICE):
        block = _already_current.get(ordinal)
        if block is None:
            block = _already_current[ordinal] = AlreadyCurrent(primary_context(ordinal))
        return block
    return ContextBlock(primary_context(ordinal), ordinal, torch_device == ordinal)


class AlreadyCurrent:
    """device_context's block when the primary context is known to be current: no driver call."""

    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context

    def __enter__(self) -> Any:
        return self.context

    def __exit__(self, *exc: object) -> None:
        pass


_already_current: dict[int, AlreadyCurrent] = {}


class ContextBlock:
    """device_context's block when the current context must be asked for: pushes the
    primary context if another one is current (popped after the block); when it is
    current and torch's current device is its device (``torch_on_device``), marks the
    device as seen current by this thread."""

    __slots__ = ("context", "ordinal", "torch_on_device", "pushed")

    def __init__(self, context: Any, ordinal: int, torch_on_device: bool) -> None:
        self.context, self.ordinal, self.torch_on_device, self.pushed = context, ordinal, torch_on_device, False

    def __enter__(self) -> Any:
        if int(checked("cuCtxGetCurrent")) != int(self.context):
            checked("cuCtxPushCurrent", self.context)
            self.pushed = True
        elif self.torch_on_device:
            _seen.device = self.ordinal
        return self.context

    def __exit__(self, *exc: object) -> None:
        if self.pushed:
            checked("cuCtxPopCurrent")


def context_device(context: Any) -> int:
    """The ordinal of the device ``context`` (a CUcontext) belongs to."""
    checked("cuCtxPushCurrent", context)
    try:
        return int(checked("cuCtxGetDevice"))
    finally:
        checked("cuCtxPopCurrent")


def module_for(context: Any, sha256: str, read_image: Callable[[], bytes]) -> Any:
    """The module of a cubin in ``context``, loaded on first use (``read_image`` runs once)."""
    key = (int(context), sha256)
    with _lock:
        if key not in _modules:
            _modules[key] = checked("cuModuleLoadData", read_image())
        return _modules[key]


def kernel_function(module: Any, symbol: str, dynamic_smem_bytes: int) -> Any:
    """A kernel of a loaded module, its dynamic shared memory limit set once."""
    key = (int(module), symbol)
    with _lock:
        if key not in _functions:
            function = checked("cuModuleGetFunction", module, symbol.encode())
            checked(
                "cuFuncSetAttribute",
                function,
                cuda_driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_smem_bytes,
            )
            _functions[key] = function
        return _functions[key]
