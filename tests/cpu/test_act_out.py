"""act_out variants on the CPU: the key field, names, specs, the family's declarations, the
runtime's options and build hint, the torch op's fake shapes and CPU reference, and (slow)
the manifest entry of a compiled act_out variant."""

from __future__ import annotations

import pytest
import torch
from dglu.contract.keys import KEY_FIELD_DEFAULTS, variant_name
from dglu_build.kernels.registry import families
from dglu.selection import VariantRequest, build_command, missing_variant_message

from dglu_build.kernels.declaration import Pointer, check_signature
from dglu_build.kernels.sm90_bf16 import interface
from dglu_build.kernels.sm90_bf16.config import Config
from dglu_build.specs import parse_specs

from test_deterministic_mode import BASE, FAST_NAME, SPEC, _options


def test_the_field_defaults_to_false_and_names_only_act_out_keys() -> None:
    assert KEY_FIELD_DEFAULTS["act_out"] is False
    assert families()["sm90_bf16"].allowed["act_out"] == (False, True)
    assert variant_name({**BASE, "act_out": False}) == variant_name(BASE) == FAST_NAME
    assert variant_name({**BASE, "act_out": True}) == FAST_NAME + "_aout"
    assert variant_name({**BASE, "deterministic": True, "act_out": True}) == FAST_NAME + "_det_aout"


def test_specs_take_act_out() -> None:
    (plain,) = parse_specs(SPEC % "")
    assert plain.act_out is False and plain.key["act_out"] is False
    (aout,) = parse_specs(SPEC % ", act_out: true")
    assert aout.act_out is True and aout.name == FAST_NAME + "_aout"


def test_act_out_declares_an_output_and_a_last_main_kernel_pointer() -> None:
    plain = Config.from_key(BASE)
    aout = Config.from_key({**BASE, "act_out": True})
    assert "act_out" not in interface.arguments(plain)
    assert interface.arguments(aout)["act_out"] == {
        "shape": ["m", "n", 1], "strides": ["n", 1, "m*n"], "dtypes": ["bf16"], "io": "out", "align": 16,
        "rank_drop": True,
    }
    assert interface.main_kernel(aout).params == (*interface.main_kernel(plain).params, Pointer("act_out"))
    assert {k: v for k, v in interface.entry(aout).items() if k != "arguments"} == {
        k: v for k, v in interface.entry(plain).items() if k != "arguments"}


def test_signature_check_leaves_out_trailing_none_parameters_only() -> None:
    from dglu_build.kernels.declaration import Int32

    def kernel(x: Int32, extra: Pointer = None):  # annotations named as the DSL's types
        pass

    check_signature(kernel, (Int32("x"),))
    check_signature(kernel, (Int32("x"), Pointer("extra")))
    with pytest.raises(TypeError):
        check_signature(kernel, ())


def test_options_and_the_missing_variant_hint() -> None:
    assert _options().act_out is False and _options(act_out=True).act_out is True
    with pytest.raises(ValueError, match=r"act_out: expected a bool, got 1"):
        _options(act_out=1)
    request = VariantRequest(
        arch="sm_90a", ab_dtype="bf16", c_dtype="bf16", d_dtype="bf16", act_func="dswiglu", act_params=(),
        dbias=True, weight_mode="dense", b_major="k", act_out=True,
    )
    message = missing_variant_message(request, [])
    assert FAST_NAME + "_aout" in message and "--act-out" in message
    assert "--act-out" not in build_command({**BASE, "deterministic": False})


def test_the_torch_op_returns_act_out_when_asked() -> None:
    from dglu.torch import grouped_gemm_dglu
    from dglu.torch.activations import SWIGLU
    from dglu.torch.reference import act_out_reference, use_reference_on_cpu
    from test_torch_op import ENDS, M, N, inputs

    use_reference_on_cpu()
    x = inputs()
    plain = grouped_gemm_dglu(**x)
    assert len(plain) == 7
    out = grouped_gemm_dglu(**x, act_out=True)
    assert len(out) == 8 and out.act_out_tensor.shape == (M, N, 1)
    assert out.act_out_tensor.dtype == torch.bfloat16
    expected = act_out_reference(x["c_tensor"], x["padded_offsets"], x["beta_tensor"], x["prob_tensor"], SWIGLU)
    valid = ENDS[-1]
    torch.testing.assert_close(out.act_out_tensor.view(M, N)[:valid].double(), expected[:valid],
                               rtol=2.0**-8, atol=1e-6)
    torch.testing.assert_close(out.d_row_tensor, plain.d_row_tensor, rtol=0, atol=0)


@pytest.mark.slow
def test_a_compiled_act_out_variant_declares_its_output_and_pointer() -> None:
    pytest.importorskip("cutlass")
    from dglu_build.kernels import compile_variant

    key = {**BASE, "deterministic": False, "act_out": True}
    name = variant_name(key)
    entry = compile_variant(key, "dglu_" + name).entry
    assert entry["arguments"]["act_out"]["io"] == "out"
    (main,) = [k for k in entry["kernels"] if k["role"] == "main"]
    assert main["symbol"].startswith(f"dglu_{name}_main_")
    assert main["params"][-1] == {"name": "act_out", "kind": "pointer", "size": 8, "align": 8, "tensor": "act_out"}


@pytest.mark.parametrize("biases", [False, True])
def test_the_mlp_takes_dw2_from_the_fused_act_out_with_the_recompute_s_result(biases, monkeypatch) -> None:
    """bf16 on the CPU: the backward asks the op for A (the reference writes it); dW2 and
    every other gradient equal those of the eager recompute."""
    import dglu.torch.mlp as mlp
    from dglu.torch import expert_mlp
    from test_torch_mlp import gradients, problem

    tensors, offsets, dy = problem(torch.bfloat16, biases)
    args = lambda: (tensors["x"], tensors["prob"], offsets, tensors["w1"], tensors["w2"],  # noqa: E731
                    tensors["b1"], tensors["b2"])
    assert mlp._act_out_served(torch.device("cpu"), torch.bfloat16, mlp.SWIGLU, biases)
    assert not mlp._act_out_served(torch.device("cpu"), torch.float32, mlp.SWIGLU, biases)
    asked = []
    original = mlp.grouped_gemm_dglu
    monkeypatch.setattr(mlp, "grouped_gemm_dglu", lambda *a, **kw: asked.append(kw["act_out"]) or original(*a, **kw))
    fused = gradients(expert_mlp(*args()), dy, tensors)
    monkeypatch.setattr(mlp, "_act_out_served", lambda *a: False)
    recomputed = gradients(expert_mlp(*args()), dy, tensors)
    assert asked == [True, False]
    assert fused.keys() == recomputed.keys()
    for name in fused:
        torch.testing.assert_close(fused[name], recomputed[name], rtol=0, atol=0, msg=name)
