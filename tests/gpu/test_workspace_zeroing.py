"""dbias_ws is zeroed by its consumer (``zero: by_consumer``, docs/manifest.md): cleared once
when a stream's pool allocates it, then left zero by dbias_finish, so no call clears it.
Every call here starts from fresh inputs and is checked element by element (harness.py):
a call that found the sums of the one before it in dbias_ws would fail its dbias check.

Calls run on torch's default stream (no capture query) and on a side stream, through the
class API and the wrapper, with the pool's workspace grown by a call with more experts and
then reused, only its first part, by smaller ones. (The MXFP8 family uses the same
finisher: test_blockscaled_gpu.py's dbias cases; CUDA graphs: test_concurrency.py.)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import BF16, WIDE, Config  # noqa: E402
from harness import Case, run_case  # noqa: E402
from inputs import Shape  # noqa: E402

pytestmark = pytest.mark.gpu

FEW = Shape(n=96, k=200, expert_rows=(256, 384), extra_rows=64)
MANY = Shape(n=96, k=200, expert_rows=(256, 0, 512, 768, 256, 128), extra_rows=100)
CONFIGS = [
    Config("dswiglu", BF16, BF16, True, WIDE),
    Config("dgeglu", BF16, BF16, True, WIDE, weight_mode="discrete", b_major="k"),
]


@pytest.mark.parametrize("api", ["class", "wrapper"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("side_stream", [False, True], ids=["default-stream", "side-stream"])
def test_consecutive_calls_each_find_the_dbias_workspace_zero(
    config: Config, api: str, side_stream: bool, seed: int
) -> None:
    stream = torch.cuda.Stream() if side_stream else torch.cuda.default_stream()
    with torch.cuda.stream(stream):
        for round_, shape in enumerate([FEW, FEW, MANY, FEW, MANY]):
            run_case(Case(config, shape, seed + round_, api=api))
