"""cuDNN FE 1.32.0's newer options through dglu's front door, on the BF16 path (stand-ins:
an H200, CPU tensors, run_variant recording the problem instead of launching):
activation_tensor / sample_activation (the act_out variants' output, caller-provided),
round_dgrad_to_input_dtype (a kernel flag passed by name, refused where the selected
variant's manifest entry lists no such flag), sf_fp8_dtype_override and execute(workspace=)
(refused with the reason), and the BF16 refusals' order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import _tensor, variant_entry, variant_key, write_manifest  # noqa: E402
from dglu.contract.writer import manifest_data  # noqa: E402
from dglu import api, bound, op  # noqa: E402
from dglu.contract.keys import variant_name  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402
from dglu.runner import LoadedVariant  # noqa: E402

M, N, K, L = 1024, 96, 256, 4
PLAIN = variant_key(dbias=True)
ACT_OUT = variant_key(dbias=True, act_out=True)
ROUNDING = variant_key(dbias=True, act_func="dgeglu")
ROUND_FLAG = "round_dgrad_to_input_dtype"


def entry(key: dict, cubin: bytes) -> dict:
    """The stand-in entry of ``key``: act_out variants take the act_out output, the dgeglu
    one reads the rounding flag."""
    made = variant_entry(key, cubin, name=variant_name(key))
    made["cubin"] = f"{made['name']}.cubin"
    if key.get("act_out"):
        made["arguments"]["act_out"] = _tensor(["m", "n", 1], ["n", 1, "m*n"], ["bf16"], 16, "out", rank_drop=True)
    if key["act_func"] == "dgeglu":
        made["flags"] = [ROUND_FLAG]
    return made


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """(variant name, problem) of each run_variant call."""
    entries = []
    for key in (PLAIN, ACT_OUT, ROUNDING):
        cubin = os.urandom(512 + len(entries))
        entries.append(entry(key, cubin))
        (tmp_path / entries[-1]["cubin"]).write_bytes(cubin)
    write_manifest(tmp_path, manifest_data(entries))
    stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    records: list[tuple] = []
    for module in (op, bound):
        monkeypatch.setattr(module, "load_variant", lambda v, device: LoadedVariant(v, device, ()))
    monkeypatch.setattr(bound, "run_variant", lambda loaded, problem, *a: records.append((loaded.variant.name, problem)))
    return records


def call(**changes: object) -> dict[str, object]:
    return {
        **stand_ins.dense_call_tensors(M, N, K, L),
        "b_tensor": torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0),
        "generate_dbias": True,
        **changes,
    }


def samples(**changes: object) -> dict[str, object]:
    t = call()
    return {
        "sample_a": t["a_tensor"], "sample_c": t["c_tensor"],
        "sample_d_row": torch.empty(M, 2 * N, 1, dtype=torch.bfloat16),
        "sample_padded_offsets": t["padded_offsets"], "sample_alpha": t["alpha_tensor"],
        "sample_beta": t["beta_tensor"], "sample_prob": t["prob_tensor"], "sample_dprob": t["dprob_tensor"],
        "sample_b": t["b_tensor"], "sample_dbias": torch.zeros(L, 2 * N, 1, dtype=torch.bfloat16), **changes,
    }  # fmt: skip


def execute_arguments(s: dict[str, object], **changes: object) -> dict[str, object]:
    names = ("a", "c", "d_row", "padded_offsets", "alpha", "beta", "prob", "dprob", "b", "dbias")
    return {
        **{(n if n == "padded_offsets" else f"{n}_tensor"): s[f"sample_{n}"] for n in names},
        **changes,
    }


def activation() -> torch.Tensor:
    return torch.full((M, N, 1), 3.0, dtype=torch.bfloat16)


def test_the_wrapper_fills_a_caller_provided_activation_tensor(runs) -> None:
    given = activation()
    out = api.grouped_gemm_dglu(**call(activation_tensor=given))
    ((name, problem),) = runs
    assert name == variant_name(ACT_OUT) and problem.tensors["act_out"].pointer == given.data_ptr()
    assert len(out) == 7  # the seed's entries: the caller holds the activation
    out = api.grouped_gemm_dglu(**call(activation_tensor=given, act_out=True))
    assert out["act_out_tensor"] is given and runs[-1][1].tensors["act_out"].pointer == given.data_ptr()


def test_a_wrong_activation_tensor_is_refused_by_name(runs) -> None:
    with pytest.raises(ValueError, match=r"act_out_tensor: shape \(1024, 192, 1\)"):
        api.grouped_gemm_dglu(**call(activation_tensor=torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16)))
    assert runs == []


def test_the_class_api_takes_sample_activation_and_activation_tensor(runs) -> None:
    s = samples(sample_activation=activation())
    gemm = api.GroupedGemmDglu(**s)
    assert gemm.check_support() and gemm.variant_name == variant_name(ACT_OUT)
    given = activation()
    gemm.execute(**execute_arguments(s, activation_tensor=given))
    assert runs[-1][1].tensors["act_out"].pointer == given.data_ptr()
    with pytest.raises(ValueError, match=r"activation_tensor: given with act_out_tensor"):
        gemm.execute(**execute_arguments(s, activation_tensor=given, act_out_tensor=given))
    with pytest.raises(ValueError, match=r"act_out_tensor: required"):
        gemm.execute(**execute_arguments(s))


def test_round_dgrad_sets_the_flag_of_a_variant_that_reads_it(runs) -> None:
    api.grouped_gemm_dglu(**call(act_func="dgeglu", round_dgrad_to_input_dtype=True))
    api.grouped_gemm_dglu(**call(act_func="dgeglu"))
    assert [problem.scalars[ROUND_FLAG] for _, problem in runs] == [1, 0]


def test_round_dgrad_is_refused_where_the_variant_has_no_such_flag(runs) -> None:
    with pytest.raises(ValueError, match=rf"{ROUND_FLAG}: True, but the selected variant {variant_name(PLAIN)}"):
        api.grouped_gemm_dglu(**call(round_dgrad_to_input_dtype=True))
    with pytest.raises(ValueError, match=rf"{ROUND_FLAG}: True, but the selected variant"):
        api.GroupedGemmDglu(**samples(round_dgrad_to_input_dtype=True)).check_support()
    with pytest.raises(ValueError, match=rf"{ROUND_FLAG}: expected a bool, got 1"):
        api.grouped_gemm_dglu(**call(round_dgrad_to_input_dtype=1))
    assert runs == []


def test_sf_fp8_dtype_override_and_workspace_are_refused_with_the_reason(runs) -> None:
    with pytest.raises(ValueError, match=r"sf_fp8_dtype_override: got 'e5m3'; .*Rubin"):
        api.grouped_gemm_dglu(**call(sf_fp8_dtype_override="e5m3"))
    with pytest.raises(ValueError, match=r"sf_fp8_dtype_override: got 'e5m3'; .*Rubin"):
        api.GroupedGemmDglu(**samples(sf_fp8_dtype_override="e5m3")).check_support()
    s = samples()
    gemm = api.GroupedGemmDglu(**s)
    with pytest.raises(ValueError, match=r"workspace: got .*dglu provides each variant's workspaces"):
        gemm.execute(**execute_arguments(s), workspace=torch.zeros(16))
    assert runs == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"act_func": "nope", "padded_offsets": None, "prob_tensor": torch.ones(M + 1, 1, 1)}, r"act_func: expected"),
        ({"padded_offsets": None, "prob_tensor": torch.ones(M + 1, 1, 1)}, r"padded_offsets: required"),
        ({"a_tensor": None, "act_func": "nope"}, r"a_tensor: required"),
        ({"sfa_tensor": torch.zeros(4), "act_func": "nope", "padded_offsets": None}, r"sfa_tensor: got a Tensor; block-scaled"),
    ],
    ids=["options before missing tensors", "missing tensors before shapes", "A first", "BF16 family first"],
)
def test_bf16_refusals_come_in_order(runs, changes, message) -> None:
    with pytest.raises((ValueError, NotImplementedError), match=message):
        api.grouped_gemm_dglu(**call(**changes))
    assert runs == []


def test_positional_arguments_bind_as_in_cudnn_fe(runs) -> None:
    """The first eight parameters by position, generate_dbias the eleventh (1.32.0's order)."""
    t = call()
    positional = [t[n] for n in ("a_tensor", "c_tensor")] + [None] + [
        t[n] for n in ("padded_offsets", "alpha_tensor", "beta_tensor", "prob_tensor", "dprob_tensor")
    ]
    out = api.grouped_gemm_dglu(*positional, t["b_tensor"], None, True)
    assert out["dbias_tensor"] is not None and runs[-1][0] == variant_name(PLAIN)
