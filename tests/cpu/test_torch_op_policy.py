"""torch.ops.dglu.grouped_gemm_dglu against the families' front policies: a custom op's
schema is fixed when it is registered, so the policies cannot reorder its returns; these
tests pin that the Python entry's results are every family's policy ``outputs`` (roles and
order) and that the op's returns are the policies' new outputs plus act_out."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dglu.contract.element_types import ELEMENT_TYPES  # noqa: E402
from dglu.contract.front import FrontPolicy, read_front  # noqa: E402
from dglu.torch.op import OUTPUTS, DgluActOutputs, DgluOutputs  # noqa: E402
from dglu_build.kernels.sm90_bf16.interface import FRONT as SM90_BF16  # noqa: E402
from dglu_build.kernels.sm90_mxfp8.interface import FRONT as SM90_MXFP8  # noqa: E402
from dglu_build.kernels.sm100_bf16.interface import FRONT as SM100_BF16  # noqa: E402
from dglu_build.kernels.sm100_blockscaled.interface import FRONTS as SM100_BLOCKSCALED  # noqa: E402

FRONTS = {"sm90_bf16": SM90_BF16, "sm90_mxfp8": SM90_MXFP8, "sm100_bf16": SM100_BF16,
          **{f"sm100_{name}": front for name, front in SM100_BLOCKSCALED.items()}}  # fmt: skip
ACCUMULATED = ("dprob",)  # roles the op mutates in place (its schema's mutated argument)


def _policy(family: str) -> FrontPolicy:
    return read_front(FRONTS[family], family, ELEMENT_TYPES)


def _names(roles: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{role}_tensor" for role in roles)


@pytest.mark.parametrize("family", sorted(FRONTS))
def test_the_python_entry_returns_the_policys_outputs_in_its_order(family: str) -> None:
    outputs = _names(_policy(family).outputs)
    assert DgluOutputs._fields == outputs
    assert DgluActOutputs._fields == (*outputs, "act_out_tensor")


@pytest.mark.parametrize("family", sorted(FRONTS))
def test_the_op_returns_the_policys_new_outputs_and_act_out(family: str) -> None:
    made = _names(tuple(role for role in _policy(family).outputs if role not in ACCUMULATED))
    assert set(OUTPUTS[:-1]) == set(made) and OUTPUTS[-1] == "act_out_tensor"
    schema = torch.ops.dglu.grouped_gemm_dglu.default._schema
    assert [str(ret.type) for ret in schema.returns] == ["Tensor"] * len(OUTPUTS)
    mutated = tuple(arg.name for arg in schema.arguments if arg.alias_info and arg.alias_info.is_write)
    assert mutated == _names(ACCUMULATED)
