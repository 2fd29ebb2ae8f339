"""torch.ops.dglu.grouped_gemm_dglu with block-scaled arguments, on the CPU stand-ins: the
op's real implementation (the wrapper) and its fake one give the same outputs (shapes,
strides, dtypes, which ones are absent) for MXFP8 calls on Hopper and on Blackwell and for
an NVFP4 call on Blackwell, whose per-expert amax the op returns; the manifests are
test_blockscaled_refusals' (sm90_mxfp8 from its declaration) and
test_sm100_blockscaled_front's (sm100_blockscaled)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import stand_ins  # noqa: E402
import test_blockscaled_refusals as mx  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402
from dglu.torch.op import OUTPUTS, _fake, _PARAMETERS, grouped_gemm_dglu, grouped_gemm_dglu_op  # noqa: E402
from test_torch_op import op_args  # noqa: E402


def _calls(request, tmp_path, monkeypatch):
    if request.param == "hopper mxfp8":
        mx.write_variants(tmp_path, with_blockscaled=True)
        stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
        monkeypatch.setattr(mx.bound, "run_variant", lambda *a, **k: None)
        for module in (mx.op, mx.bound):
            monkeypatch.setattr(module, "load_variant", lambda v, device: mx.LoadedVariant(v, device, ()))
        return mx.wrapper_call()
    sm100 = pytest.importorskip("test_sm100_blockscaled_front", reason="needs the sm100_blockscaled family")
    sm100._stand_ins(sm100.B200, tmp_path, monkeypatch)
    return sm100._call() if request.param == "blackwell nvfp4" else sm100._mxfp8_call()


@pytest.fixture(params=["hopper mxfp8", "blackwell mxfp8", "blackwell nvfp4"])
def call(request, tmp_path, monkeypatch):
    return request.param, _calls(request, tmp_path, monkeypatch)


def _described(tensors) -> list:
    return [(tuple(t.shape), t.stride(), t.dtype) if t.dim() > 1 else None for t in tensors]


def test_the_fake_outputs_are_the_ops_real_ones(call):
    name, arguments = call
    args = op_args(arguments)
    real = grouped_gemm_dglu_op._init_fn(**dict(zip(_PARAMETERS, args)))  # the op's CUDA implementation
    fake = _fake(*args)
    assert _described(fake) == _described(real)
    present = {output for output, tensor in zip(OUTPUTS, real) if tensor.dim() > 1}
    expected = {"d_row_tensor", "dbias_tensor"} | (
        {"amax_tensor"} if name.endswith("nvfp4") else {"d_col_tensor", "sfd_row_tensor", "sfd_col_tensor"}
    )
    assert present == expected


def test_the_python_entry_returns_amax_of_an_nvfp4_call(call, monkeypatch):
    name, arguments = call
    monkeypatch.setattr(torch.ops.dglu, "grouped_gemm_dglu", lambda *args: grouped_gemm_dglu_op._init_fn(
        **dict(zip(_PARAMETERS, args))))
    out = grouped_gemm_dglu(**arguments)
    assert out.dprob_tensor is arguments["dprob_tensor"]
    if name.endswith("nvfp4"):
        assert out.amax_tensor.shape == (arguments["alpha_tensor"].shape[0], 2, 1)
        assert out.d_col_tensor is out.sfd_row_tensor is out.sfd_col_tensor is None
    else:
        assert out.amax_tensor is None and out.sfd_row_tensor.dtype == torch.float8_e8m0fnu
