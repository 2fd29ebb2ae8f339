"""round_dgrad_to_input_dtype (cuDNN FE 1.32.0's option) on the CPU: a runtime flag of the
BF16 family's main kernel (declared once, in the manifest's ``flags``), absent from the
block-scaled composition; the options' checks and refusal; the value each API call hands
the kernels. The rounding itself: test_golden_values.py (the reference),
test_runtime_gpu_reference.py (the GPU checks tell rounded from unrounded R), and (slow)
test_runtime_real_artifacts.py (the compiled kernels' parameter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dglu_build.kernels.declaration import Int32, Pointer, check_signature
from dglu_build.kernels.sm90_bf16 import interface
from dglu_build.kernels.sm90_bf16.config import Config
from dglu_build.kernels.sm90_mxfp8 import interface as mx_interface
from dglu_build.kernels.sm90_mxfp8.config import Config as MxConfig

from conftest_runtime import mxfp8_policy
from test_deterministic_mode import BASE, _options

FLAG = "round_dgrad_to_input_dtype"
BF16_KEYS = {
    "dense": BASE,
    "act_out": {**BASE, "act_out": True},
    "deterministic": {**BASE, "deterministic": True},
    "discrete": {**BASE, "weight_mode": "discrete", "b_major": "n", "dbias": False},
}


@pytest.mark.parametrize("key", list(BF16_KEYS.values()), ids=list(BF16_KEYS))
def test_every_bf16_variant_declares_the_flag_as_the_main_kernels_int32_after_l(key) -> None:
    config = Config.from_key(key)
    assert interface.entry(config)["flags"] == [FLAG]
    params = interface.main_kernel(config).params
    after_l = params[params.index(Int32("l")) + 1:]
    assert after_l == ((Int32(FLAG), Pointer("act_out")) if config.act_out else (Int32(FLAG),))


def test_signature_check_reads_an_optional_int32_before_the_act_out_pointer() -> None:
    """The DSL casts a plain Int32 parameter's None, so the kernel annotates the flag
    ``Int32 | None``; a kernel without the flag (the block-scaled composition's) leaves
    both trailing parameters out."""

    def kernel(l: Int32, round_dgrad: Int32 | None = None, act_out: Pointer = None):  # the DSL's type names
        pass

    for declared in ((Int32("l"),), (Int32("l"), Int32(FLAG)), (Int32("l"), Int32(FLAG), Pointer("act_out"))):
        check_signature(kernel, declared)
    with pytest.raises(TypeError):
        check_signature(kernel, (Int32("l"), Pointer("act_out")))


def test_the_block_scaled_composition_has_no_such_flag() -> None:
    config = MxConfig.from_key({**BASE, "ab_dtype": "e4m3", "d_dtype": "e4m3", "act_func": "dgeglu"})
    assert config.main.block_scaled_contract and not interface.takes_dgrad_rounding(config.main)
    assert FLAG not in mx_interface.entry(config)["flags"]
    main = next(k for k in mx_interface.kernels(config) if k.role == "main")
    assert [p.scalar for p in main.params if isinstance(p, Int32)] == ["n", "l", "discrete_col_sfd"]


def test_options_take_it_as_a_bool_and_set_the_flag() -> None:
    assert _options().flags()[FLAG] == 0
    assert _options(round_dgrad_to_input_dtype=True).flags()[FLAG] == 1
    with pytest.raises(ValueError, match=r"^round_dgrad_to_input_dtype: expected a bool, got 1$"):
        _options(round_dgrad_to_input_dtype=1)


def test_fp8_operands_refuse_it() -> None:
    block_scaled = {"sf_vec_size": 32, "policy": mxfp8_policy()}  # the sm90_mxfp8 family's rules
    assert _options(**block_scaled).round_dgrad is False
    with pytest.raises(ValueError, match=r"^round_dgrad_to_input_dtype: got True; must be False with FP8 operands"):
        _options(**block_scaled, round_dgrad_to_input_dtype=True)


# --- what the API hands the kernels ------------------------------------------------------

torch = pytest.importorskip("torch", reason="the API calls need torch tensors")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, write_artifacts  # noqa: E402
from dglu import api, bound  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402
from dglu.runner import LoadedVariant  # noqa: E402
from test_runtime_api_flow import K, L, M, N, tensors  # noqa: E402


@pytest.fixture
def flags_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The flag's value in each run_variant call, over a variant that declares it."""
    write_artifacts(tmp_path, [variant_key()], flags=[FLAG])
    stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    values: list[int] = []
    monkeypatch.setattr(bound, "load_variant", lambda v, device: LoadedVariant(v, device, ()))
    monkeypatch.setattr(
        bound, "run_variant", lambda loaded, problem, *args: values.append(problem.scalars[FLAG])
    )
    return values


def test_the_wrapper_hands_the_kernels_the_flag_of_each_call(flags_run) -> None:
    """Calls alternating on the same tensors: the fast path keeps each setting's own value."""
    arguments = {**tensors(), "b_tensor": torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0),
                 "generate_dbias": True}
    for rounded in (True, False, True, False):
        api.grouped_gemm_dglu_wrapper_sm90(**arguments, round_dgrad_to_input_dtype=rounded)
    api.grouped_gemm_dglu_wrapper_sm90(**arguments)
    assert flags_run == [1, 0, 1, 0, 0]


@pytest.mark.parametrize("rounded", [True, False])
def test_the_class_api_hands_the_kernels_its_constructors_flag(flags_run, rounded: bool) -> None:
    t = tensors()
    b = torch.zeros(L, N, K, dtype=torch.bfloat16).permute(1, 2, 0)
    d_row = torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16)
    dbias = torch.zeros(L, 2 * N, 1, dtype=torch.bfloat16)
    built = api.GroupedGemmDgluSm90(
        sample_a=t["a_tensor"], sample_c=t["c_tensor"], sample_d_row=d_row, sample_b=b,
        sample_padded_offsets=t["padded_offsets"], sample_alpha=t["alpha_tensor"], sample_beta=t["beta_tensor"],
        sample_prob=t["prob_tensor"], sample_dprob=t["dprob_tensor"], sample_dbias=dbias,
        round_dgrad_to_input_dtype=rounded,
    )
    assert built.check_support()
    built.execute(**t, d_row_tensor=d_row, dbias_tensor=dbias, b_tensor=b)
    assert flags_run == [int(rounded)]
