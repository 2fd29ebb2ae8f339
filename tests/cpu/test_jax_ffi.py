"""dglu.jax.ffi on XLA:CPU (the same call-frame ABI as XLA:GPU): handlers written in Python
registered as typed FFI targets and called through jax.jit."""

from __future__ import annotations

import ctypes
import itertools

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
np = pytest.importorskip("numpy")
jnp = jax.numpy

from dglu.jax import ffi  # noqa: E402  (after the skip)

_names = itertools.count()


def _register(function, **options) -> str:
    """Register ``function`` on XLA:CPU under a fresh target name; return the name."""
    name = f"dglu_test_{next(_names)}"
    ffi.register(name, ffi.Handler(function, **options), "cpu")
    return name


def _host_array(buffer: ffi.Buffer, element) -> np.ndarray:
    """A numpy view of a host buffer of the call."""
    pointer = ctypes.cast(buffer.data, ctypes.POINTER(element))
    return np.ctypeslib.as_array(pointer, buffer.dims)


def _affine(call: ffi.DecodedCall) -> None:
    """rets[0] = scale * args[0] + args[1] (float32, elementwise)."""
    x = _host_array(call.args[0], ctypes.c_float)
    y = _host_array(call.args[1], ctypes.c_float)
    _host_array(call.rets[0], ctypes.c_float)[...] = call.attrs["scale"] * x + y


def test_handler_computes_under_jit():
    name = _register(_affine, command_buffer_compatible=True)

    @jax.jit
    def affine(x, y):
        return jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(x.shape, x.dtype))(
            x, y, scale=np.float32(3.0)
        )

    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    y = jnp.full((3, 4), 0.25, jnp.float32)
    np.testing.assert_array_equal(np.asarray(affine(x, y)), 3.0 * np.asarray(x) + 0.25)
    np.testing.assert_array_equal(np.asarray(affine(y, x)), 0.75 + np.asarray(x))


def _recorder(seen: list):
    def record(call: ffi.DecodedCall) -> None:
        seen.append(call)
        _host_array(call.rets[0], ctypes.c_int32)[...] = 0

    return record


def _call_recorded(seen: list, *args, **attributes) -> ffi.DecodedCall:
    name = _register(_recorder(seen))
    out = jax.jit(
        lambda *a: jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((1,), jnp.int32))(*a, **attributes)
    )(*args)
    jax.block_until_ready(out)
    assert len(seen) == 1
    return seen[0]


def test_attributes_of_every_kind_are_decoded():
    seen: list = []
    call = _call_recorded(
        seen,
        jnp.zeros((1,), jnp.int32),
        act_func="dgeglu",
        empty="",
        count=7,
        small=np.int32(-3),
        alpha=1.702,
        single=np.float32(0.5),
        flag=True,
        tile=np.array([128, 64], np.int64),
        values=np.array([1.5, -2.5], np.float32),
        nested={"n": 64, "name": "x"},
    )
    assert call.attrs == {
        "act_func": "dgeglu",
        "empty": "",
        "count": 7,
        "small": -3,
        "alpha": 1.702,
        "single": 0.5,
        "flag": True,
        "tile": (128, 64),
        "values": (1.5, -2.5),
        "nested": {"n": 64, "name": "x"},
    }
    assert type(call.attrs["flag"]) is bool and type(call.attrs["count"]) is int


def test_buffers_are_decoded_with_dtype_dims_and_data():
    seen: list = []
    with jax.enable_x64(True):  # int64 arrays (b_ptrs) need it
        a = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
        b = jnp.ones((5,), jnp.bfloat16)
        c = jnp.array([7, -1], jnp.int64)
        scalar = jnp.float16(1.0)
        call = _call_recorded(seen, a, b, c, scalar)
    assert [(buf.dtype, buf.dims) for buf in call.args] == [
        ("float32", (2, 3, 4)),
        ("bfloat16", (5,)),
        ("int64", (2,)),
        ("float16", ()),
    ]
    assert [(buf.dtype, buf.dims, buf.size) for buf in call.rets] == [("int32", (1,), 1)]
    assert all(buf.data for buf in call.args + call.rets)
    assert call.device_ordinal() == 0


def test_buffer_contents_are_the_inputs():
    """The handler reads its inputs' bytes at the decoded addresses (row-major)."""
    copies: list = []

    def copy(call: ffi.DecodedCall) -> None:
        copies.append(_host_array(call.args[0], ctypes.c_int64).copy())
        _host_array(call.rets[0], ctypes.c_int64)[...] = copies[-1][::-1]

    name = _register(copy)
    with jax.enable_x64(True):
        x = jnp.arange(6, dtype=jnp.int64).reshape(2, 3) * 10
        out = jax.jit(
            lambda x: jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        )(x)
    np.testing.assert_array_equal(copies[0], np.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x)[::-1])


@pytest.mark.parametrize(
    ("exception", "code"),
    [(ValueError("a_tensor: bad shape (3, 4)"), "INVALID_ARGUMENT"), (KeyError("m"), "INTERNAL")],
)
def test_handler_exception_reaches_the_caller(exception, code):
    def fail(call: ffi.DecodedCall) -> None:
        raise exception

    name = _register(fail)
    x = jnp.ones((4,), jnp.float32)
    run = jax.jit(lambda x: jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(x.shape, x.dtype))(x))
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(run(x))
    message = str(raised.value)
    assert code in message and f"{type(exception).__name__}: {exception}" in message


def test_stream_outside_a_gpu_is_an_error():
    def ask_stream(call: ffi.DecodedCall) -> None:
        call.stream()

    name = _register(ask_stream)
    run = jax.jit(lambda x: jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((1,), jnp.int32))(x))
    with pytest.raises(jax.errors.JaxRuntimeError, match="FfiError: XLA FFI Stream_Get"):
        jax.block_until_ready(run(jnp.zeros((1,), jnp.int32)))


@pytest.mark.parametrize("compatible", [False, True])
def test_metadata_request_is_answered_without_calling_the_function(compatible):
    """The frame XLA sends at registration: a metadata extension and no buffers."""
    calls: list = []
    handler = ffi.Handler(calls.append, command_buffer_compatible=compatible)
    metadata = ffi.Metadata(struct_size=ctypes.sizeof(ffi.Metadata))
    extension = ffi.MetadataExtension(
        ffi.ExtensionBase(ctypes.sizeof(ffi.MetadataExtension), ffi.METADATA_EXTENSION, None),
        ctypes.pointer(metadata),
    )
    frame = ffi.CallFrame(struct_size=ctypes.sizeof(ffi.CallFrame))
    frame.extension_start = ctypes.cast(ctypes.pointer(extension), ctypes.POINTER(ffi.ExtensionBase))
    assert handler.pointer(ctypes.pointer(frame)) is None  # NULL: no error
    assert (metadata.api_version.major_version, metadata.api_version.minor_version) == (0, 3)
    assert metadata.traits == (ffi.COMMAND_BUFFER_COMPATIBLE if compatible else 0)
    assert calls == []


def test_a_taken_name_refuses_another_handler():
    name = _register(_affine)
    again = ffi.registered(name, "cpu")
    ffi.register(name, again, "cpu")  # the same handler: a no-op
    with pytest.raises(ValueError, match=f"FFI target '{name}' is already registered"):
        ffi.register(name, ffi.Handler(_affine), "cpu")
