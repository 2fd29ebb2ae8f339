"""Turn the ``current_stream`` argument into the torch stream a call runs on."""

from __future__ import annotations

from typing import Any


def resolve_stream(current_stream: Any, device: int) -> Any:
    """A torch.cuda.Stream for ``current_stream`` on ``device``.

    Accepts None (torch's current stream on the device), a torch.cuda.Stream, a
    cuda.bindings.driver.CUstream or an int stream handle (wrapped as an ExternalStream).
    """
    import torch
    from cuda.bindings import driver

    if current_stream is None:
        return torch.cuda.current_stream(device)
    if isinstance(current_stream, torch.cuda.Stream):
        if current_stream.device.index != device:
            raise ValueError(
                f"current_stream: belongs to cuda:{current_stream.device.index}, but the "
                f"tensors are on cuda:{device}"
            )
        return current_stream
    if isinstance(current_stream, driver.CUstream) or (
        isinstance(current_stream, int) and not isinstance(current_stream, bool)
    ):
        return torch.cuda.ExternalStream(int(current_stream), device=torch.device("cuda", device))
    raise TypeError(
        "current_stream: expected None, a torch.cuda.Stream, a cuda.bindings CUstream or an "
        f"int handle, got {type(current_stream).__name__}"
    )
