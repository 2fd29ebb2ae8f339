"""Turn the ``current_stream`` argument into the stream handle a call runs on, refusing a
stream of another device or CUDA context than the call's tensors before anything is
allocated or enqueued."""

from __future__ import annotations

from typing import Any

from .arrays import torch_module
from .driver import checked, context_device, primary_context
from .errors import CudaDriverError, StreamDeviceError

# The legacy default, legacy and per-thread stream handles: streams of whichever context is
# current, which is the device's primary context while dglu enqueues.
CURRENT_CONTEXT_STREAMS = (0, 1, 2)


def resolve_stream(current_stream: Any, device: int) -> int:
    """The CUstream handle (an int) of ``current_stream`` on ``device``.

    Accepts None (torch's current stream on the device), a torch.cuda.Stream (of that
    device), a cuda.bindings.driver.CUstream or an int stream handle. A raw handle (and a
    torch.cuda.ExternalStream) is checked to belong to the device's primary context, the
    one torch allocates in and dglu loads its kernels into.
    """
    torch = torch_module()
    if current_stream is None:
        return torch._C._cuda_getCurrentRawStream(device)
    if isinstance(current_stream, torch.cuda.Stream):
        if current_stream.device.index != device:
            raise StreamDeviceError(
                f"current_stream: belongs to cuda:{current_stream.device.index}, but the "
                f"tensors are on cuda:{device}; pass a stream of cuda:{device}"
            )
        if isinstance(current_stream, torch.cuda.ExternalStream):
            check_stream_context(current_stream.cuda_stream, device)
        return current_stream.cuda_stream
    if isinstance(current_stream, int) and not isinstance(current_stream, bool):
        check_stream_context(current_stream, device)
        return current_stream
    from cuda.bindings import driver

    if isinstance(current_stream, driver.CUstream):
        check_stream_context(int(current_stream), device)
        return int(current_stream)
    raise TypeError(
        "current_stream: expected None, a torch.cuda.Stream, a cuda.bindings CUstream or an "
        f"int handle, got {type(current_stream).__name__}"
    )


def check_stream_context(stream: int, device: int) -> None:
    """Raise StreamDeviceError unless the stream handle ``stream`` belongs to ``device``'s
    primary context (cuStreamGetCtx)."""
    if stream in CURRENT_CONTEXT_STREAMS:
        return
    from cuda.bindings import driver

    try:
        context = checked("cuStreamGetCtx", driver.CUstream(stream))
    except CudaDriverError as exc:
        raise StreamDeviceError(
            f"current_stream: {stream:#x} is not a usable stream handle ({exc}); pass a live "
            f"stream of cuda:{device}"
        ) from exc
    if int(context) == int(primary_context(device)):
        return
    owner = context_device(context)
    if owner != device:
        raise StreamDeviceError(
            f"current_stream: stream {stream:#x} belongs to cuda:{owner}, but the tensors are "
            f"on cuda:{device}; pass a stream of cuda:{device} (e.g. "
            f"torch.cuda.current_stream({device}))"
        )
    raise StreamDeviceError(
        f"current_stream: stream {stream:#x} belongs to a CUDA context of cuda:{device} other "
        "than its primary context, where torch allocates the tensors and dglu loads its "
        f"kernels; create the stream in the primary context (e.g. torch.cuda.Stream({device}))"
    )


def on_stream(stream: int, device: int) -> Any:
    """A context making ``stream`` torch's current stream on ``device`` (to allocate or read
    on it); nothing to do when it already is."""
    import contextlib

    import torch

    if stream == torch._C._cuda_getCurrentRawStream(device):
        return contextlib.nullcontext()
    return torch.cuda.stream(
        torch.cuda.ExternalStream(stream, device=torch.device("cuda", device))
    )
