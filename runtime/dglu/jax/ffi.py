"""XLA FFI handlers written in Python: the typed FFI call frame read through ctypes.

No compiled extension: ``Handler`` wraps a Python function ``(call: DecodedCall) -> None``
in a ``ctypes.CFUNCTYPE`` whose pointer jaxlib registers as a typed FFI target
(``jax.ffi.register_ffi_target(..., api_version=1)``; called through ``jax.ffi.ffi_call``).
The struct layouts are those of ``jaxlib/include/xla/ffi/api/c_api.h`` (API 0.3, the same
in jaxlib 0.10.2 and 0.11.2). XLA:CPU ("cpu") and XLA:GPU ("CUDA") share this ABI.

What the trampoline guarantees:
- XLA's metadata call at registration (an extension of type 1 on the call frame) gets the
  API version this layer speaks and the handler's traits (COMMAND_BUFFER_COMPATIBLE when
  asked) and nothing else runs.
- An exception from the Python function never leaves the callback: it becomes an XLA FFI
  error carrying ``"<type>: <message>"``, which reaches the caller as ``JaxRuntimeError``.
- Buffers and attributes are decoded into plain Python values; the stream and device
  ordinal are read through the API's functions only when the function asks for them.

The callback runs on the thread that executes the computation, with the GIL taken back by
the ctypes trampoline; it must never call JAX, block on the stream or (under command-buffer
capture) allocate, synchronise or read device memory.
"""

from __future__ import annotations

import ctypes
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..contract.records import Record

API_MAJOR, API_MINOR = 0, 3  # the c_api.h this layout follows
METADATA_EXTENSION = 1  # XLA_FFI_Extension_Metadata
COMMAND_BUFFER_COMPATIBLE = 1  # XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE
ERROR_INVALID_ARGUMENT, ERROR_INTERNAL = 3, 13  # XLA_FFI_Error_Code
ATTR_ARRAY, ATTR_DICTIONARY, ATTR_SCALAR, ATTR_STRING = 1, 2, 3, 4  # XLA_FFI_AttrType

# XLA_FFI_DataType -> numpy dtype name (the types a dglu call can carry, and common others)
DTYPES: dict[int, str] = {
    1: "bool",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "uint8",
    7: "uint16",
    8: "uint32",
    9: "uint64",
    10: "float16",
    11: "float32",
    12: "float64",
    16: "bfloat16",
    19: "float8_e5m2",
    20: "float8_e4m3fn",
    32: "float4_e2m1fn",
    33: "float8_e8m0fnu",
}
_CTYPES: dict[str, Any] = {  # scalar and array attribute element types
    "bool": ctypes.c_bool,
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}


class ExtensionBase(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("next", ctypes.c_void_p),
    ]


class ApiVersion(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("major_version", ctypes.c_int),
        ("minor_version", ctypes.c_int),
    ]


class Metadata(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("api_version", ApiVersion),
        ("traits", ctypes.c_uint32),
        ("state_type_id", ctypes.c_int64),
    ]


class MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", ctypes.POINTER(Metadata))]


class ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.c_void_p)]


class Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("size", ctypes.c_size_t), ("data", ctypes.c_void_p)]


class BufferStruct(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int64),
        ("dims", ctypes.POINTER(ctypes.c_int64)),
    ]


class Args(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets have one layout
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("size", ctypes.c_int64),
        ("types", ctypes.POINTER(ctypes.c_int)),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
    ]


class Attrs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("size", ctypes.c_int64),
        ("types", ctypes.POINTER(ctypes.c_int)),
        ("names", ctypes.POINTER(ctypes.POINTER(ByteSpan))),
        ("attrs", ctypes.POINTER(ctypes.c_void_p)),
    ]


class Api(ctypes.Structure):
    """XLA_FFI_Api: the function table, in c_api.h's order (each a function pointer)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("api_version", ApiVersion),
        ("internal_api", ctypes.c_void_p),
        ("Error_Create", ctypes.c_void_p),
        ("Error_GetMessage", ctypes.c_void_p),
        ("Error_Destroy", ctypes.c_void_p),
        ("Handler_Register", ctypes.c_void_p),
        ("Stream_Get", ctypes.c_void_p),
        ("Type_Register", ctypes.c_void_p),
        ("ExecutionContext_Get", ctypes.c_void_p),
        ("State_Set", ctypes.c_void_p),
        ("State_Get", ctypes.c_void_p),
        ("DeviceMemory_Allocate", ctypes.c_void_p),
        ("DeviceMemory_Free", ctypes.c_void_p),
        ("ThreadPool_Schedule", ctypes.c_void_p),
        ("ThreadPool_NumThreads", ctypes.c_void_p),
        ("Future_Create", ctypes.c_void_p),
        ("Future_SetAvailable", ctypes.c_void_p),
        ("Future_SetError", ctypes.c_void_p),
        ("RunId_Get", ctypes.c_void_p),
        ("DeviceOrdinal_Get", ctypes.c_void_p),
    ]


class CallFrame(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(ExtensionBase)),
        ("api", ctypes.POINTER(Api)),
        ("ctx", ctypes.c_void_p),
        ("stage", ctypes.c_int),
        ("args", Args),
        ("rets", Args),
        ("attrs", Attrs),
        ("future", ctypes.c_void_p),
    ]


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("message", ctypes.c_char_p),
        ("errc", ctypes.c_int),
    ]


class ErrorGetMessageArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("error", ctypes.c_void_p),
        ("message", ctypes.c_char_p),
    ]


class ErrorDestroyArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("error", ctypes.c_void_p),
    ]


class StreamGetArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class DeviceOrdinalGetArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("device_ordinal", ctypes.c_int32),
    ]


# Every API function takes one pointer to its args struct and returns an XLA_FFI_Error*
# (NULL on success) or nothing; one prototype serves them all.
_API_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
HANDLER_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(CallFrame))


class FfiError(RuntimeError):
    """An XLA FFI API function reported an error."""


class Buffer(Record):
    """One argument or result buffer: device (or host) address, numpy dtype name, dims
    (row-major, dense)."""

    data: int
    dtype: str
    dims: tuple[int, ...]

    @property
    def size(self) -> int:
        """Number of elements."""
        count = 1
        for dim in self.dims:
            count *= dim
        return count


class DecodedCall:
    """One call of a handler: its buffers, attributes, and the API's stream and device."""

    def __init__(self, frame: CallFrame) -> None:
        self._frame = frame
        self.args: tuple[Buffer, ...] = _buffers(frame.args)
        self.rets: tuple[Buffer, ...] = _buffers(frame.rets)
        self.attrs: dict[str, Any] = _attributes(frame.attrs)

    def stream(self) -> int:
        """The platform stream the call runs on (a CUstream handle on CUDA)."""
        args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), None, self._frame.ctx, None)
        _call_api(self._frame.api.contents, "Stream_Get", args)
        return args.stream or 0

    def device_ordinal(self) -> int:
        """The ordinal of the device the call runs on."""
        args = DeviceOrdinalGetArgs(ctypes.sizeof(DeviceOrdinalGetArgs), None, self._frame.ctx, 0)
        _call_api(self._frame.api.contents, "DeviceOrdinal_Get", args)
        return args.device_ordinal


def _call_api(api: Api, name: str, args: ctypes.Structure) -> None:
    """Call the API function ``name``; raise FfiError with XLA's message if it fails."""
    pointer = getattr(api, name)
    if not pointer:
        raise FfiError(f"XLA FFI: this XLA provides no {name}")
    error = _API_FUNCTION(pointer)(ctypes.addressof(args))
    if error:
        message = ErrorGetMessageArgs(ctypes.sizeof(ErrorGetMessageArgs), None, error, None)
        _API_FUNCTION(api.Error_GetMessage)(ctypes.addressof(message))
        text = (message.message or b"").decode(errors="replace")
        destroy = ErrorDestroyArgs(ctypes.sizeof(ErrorDestroyArgs), None, error)
        _API_FUNCTION(api.Error_Destroy)(ctypes.addressof(destroy))
        raise FfiError(f"XLA FFI {name}: {text}")


def _buffers(table: Args) -> tuple[Buffer, ...]:
    buffers = []
    for index in range(table.size):
        buffer = ctypes.cast(table.args[index], ctypes.POINTER(BufferStruct)).contents
        buffers.append(
            Buffer(
                data=buffer.data or 0,
                dtype=DTYPES.get(buffer.dtype, f"xla_dtype_{buffer.dtype}"),
                dims=tuple(buffer.dims[axis] for axis in range(buffer.rank)),
            )
        )
    return tuple(buffers)


def _element_type(xla_dtype: int) -> Any:
    name = DTYPES.get(xla_dtype)
    if name not in _CTYPES:
        raise FfiError(f"XLA FFI: attribute element type {name or xla_dtype} is not decoded")
    return _CTYPES[name]


def _attribute(kind: int, pointer: int) -> Any:
    if kind == ATTR_STRING:
        span = ctypes.cast(pointer, ctypes.POINTER(ByteSpan)).contents
        return ctypes.string_at(span.ptr, span.len).decode() if span.len else ""
    if kind == ATTR_SCALAR:
        scalar = ctypes.cast(pointer, ctypes.POINTER(Scalar)).contents
        return ctypes.cast(scalar.value, ctypes.POINTER(_element_type(scalar.dtype)))[0]
    if kind == ATTR_ARRAY:
        array = ctypes.cast(pointer, ctypes.POINTER(Array)).contents
        values = ctypes.cast(array.data, ctypes.POINTER(_element_type(array.dtype)))
        return tuple(values[index] for index in range(array.size))
    if kind == ATTR_DICTIONARY:
        return _attributes(ctypes.cast(pointer, ctypes.POINTER(Attrs)).contents)
    raise FfiError(f"XLA FFI: attribute kind {kind} is not decoded")


def _attributes(table: Attrs) -> dict[str, Any]:
    decoded = {}
    for index in range(table.size):
        span = table.names[index].contents
        name = ctypes.string_at(span.ptr, span.len).decode()
        decoded[name] = _attribute(table.types[index], table.attrs[index])
    return decoded


def _answer_metadata(frame: CallFrame, traits: int) -> bool:
    """Fill XLA's metadata request if the frame carries one; True when it did."""
    extension = frame.extension_start
    while extension:
        if extension.contents.type == METADATA_EXTENSION:
            request = ctypes.cast(extension, ctypes.POINTER(MetadataExtension)).contents
            metadata = request.metadata.contents
            metadata.api_version.major_version = API_MAJOR
            metadata.api_version.minor_version = API_MINOR
            metadata.traits = traits
            return True
        extension = ctypes.cast(extension.contents.next, ctypes.POINTER(ExtensionBase))
    return False


def _error(frame: CallFrame, exception: BaseException) -> int | None:
    """An XLA_FFI_Error* carrying ``exception``'s type and message."""
    invalid = isinstance(exception, ValueError | TypeError)
    code = ERROR_INVALID_ARGUMENT if invalid else ERROR_INTERNAL
    message = f"{type(exception).__name__}: {exception}".encode(errors="replace")
    args = ErrorCreateArgs(ctypes.sizeof(ErrorCreateArgs), None, message, code)
    return _API_FUNCTION(frame.api.contents.Error_Create)(ctypes.addressof(args))


class Handler:
    """A Python function as an XLA FFI handler (keep this object alive while registered)."""

    def __init__(
        self, function: Callable[[DecodedCall], None], *, command_buffer_compatible: bool = False
    ) -> None:
        self.function = function
        self.traits = COMMAND_BUFFER_COMPATIBLE if command_buffer_compatible else 0
        self.pointer = HANDLER_PROTOTYPE(self._trampoline)

    def _trampoline(self, frame_pointer: Any) -> int | None:
        frame = frame_pointer.contents
        try:
            if _answer_metadata(frame, self.traits):
                return None
            self.function(DecodedCall(frame))
            return None
        except BaseException as exception:  # never unwind through XLA's C++ frames
            try:
                return _error(frame, exception)
            except BaseException:
                # XLA could not even build an error: returning would be a silent success
                # with garbage outputs, so stop the process after saying why.
                traceback.print_exc()
                os.abort()

    def capsule(self) -> Any:
        """The handler's function pointer in a PyCapsule, as jax.ffi registers it."""
        import jax

        return jax.ffi.pycapsule(self.pointer)


_registered: dict[tuple[str, str], Handler] = {}
_register_lock = threading.Lock()


def register(name: str, handler: Handler, platform: str) -> None:
    """Register ``handler`` as the FFI target ``name`` for ``platform`` ("cpu" or "CUDA").

    Registering the same handler again is a no-op; another handler under a taken name is
    refused (XLA keeps the first one)."""
    import jax

    with _register_lock:
        known = _registered.get((name, platform))
        if known is handler:
            return
        if known is not None:
            raise ValueError(
                f"name: FFI target {name!r} is already registered for {platform} with "
                "another handler"
            )
        jax.ffi.register_ffi_target(name, handler.capsule(), platform=platform, api_version=1)
        _registered[(name, platform)] = handler


def registered(name: str, platform: str) -> Handler | None:
    """The handler registered as ``name`` for ``platform`` by this module, if any."""
    return _registered.get((name, platform))
