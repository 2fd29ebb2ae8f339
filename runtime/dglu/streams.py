"""Turn the ``current_stream`` argument into the stream handle a call runs on."""

from __future__ import annotations

from typing import Any


def resolve_stream(current_stream: Any, device: int) -> int:
    """The CUstream handle (an int) of ``current_stream`` on ``device``.

    Accepts None (torch's current stream on the device), a torch.cuda.Stream (of that
    device), a cuda.bindings.driver.CUstream or an int stream handle.
    """
    import torch

    if current_stream is None:
        return torch._C._cuda_getCurrentRawStream(device)
    if isinstance(current_stream, torch.cuda.Stream):
        if current_stream.device.index != device:
            raise ValueError(
                f"current_stream: belongs to cuda:{current_stream.device.index}, but the "
                f"tensors are on cuda:{device}"
            )
        return current_stream.cuda_stream
    if isinstance(current_stream, int) and not isinstance(current_stream, bool):
        return current_stream
    from cuda.bindings import driver

    if isinstance(current_stream, driver.CUstream):
        return int(current_stream)
    raise TypeError(
        "current_stream: expected None, a torch.cuda.Stream, a cuda.bindings CUstream or an "
        f"int handle, got {type(current_stream).__name__}"
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
