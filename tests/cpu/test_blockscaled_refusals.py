"""What the MXFP8 (block-scaled) API refuses on Hopper, one argument at a time: a ValueError
whose message starts with the argument's name and says what it got and what Hopper takes,
raised before anything is allocated on or launched to the device, no tensor written.

Stand-ins (stand_ins.py): an H200, the recording driver, CPU tensors with the device check
off, load_variant / run_variant recording instead of loading and launching. Two manifests:
- WITHOUT: the BF16 family's variants only. What the front door accepts is each family's
  front policy, data of its manifest entries (dglu.front): with no MXFP8 family installed,
  FP8 A is refused first, naming A's dtype and the families installed (``no_family``);
  FP4 A is refused by the BF16 family's data (no FP4 tensor cores on Hopper). The refusals
  must still fire before the variant selection.
- WITH: plus sm90_mxfp8 variants, whose manifest entries come from the family's declaration
  (``blockscaled_entry``; it skips until dglu_build.kernels.sm90_mxfp8 exists). Every refusal
  runs here, with those that need the variant's argument rules (B's dtype, SF shapes and
  strides, dbias' dtype, single-group offsets with L != 1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dglu.errors import VariantNotFoundError

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import blockscaled_reference as bs  # noqa: E402
import stand_ins  # noqa: E402
from conftest_runtime import DEFAULT_KEYS, variant_entry, variant_key, write_manifest  # noqa: E402
from dglu.contract.writer import manifest_data  # noqa: E402
from dglu import api, bound, op  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402
from dglu.runner import LoadedVariant  # noqa: E402

FAMILY = "sm90_mxfp8"
M, N, K, L = 1024, 96, 160, 4
E4M3, E5M2, E8M0 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu
BF16 = torch.bfloat16
MXFP8_KEYS = [
    variant_key(ab_dtype="e4m3", d_dtype="e4m3", dbias=True),
    variant_key(ab_dtype="e4m3", d_dtype="e4m3", dbias=False),
    variant_key(ab_dtype="e4m3", c_dtype="e4m3", d_dtype="e4m3", dbias=True),
    variant_key(ab_dtype="e4m3", d_dtype="e4m3", dbias=True, weight_mode="discrete"),
]


def blockscaled_entry(key: dict[str, Any], cubin: bytes) -> dict[str, Any]:
    """The manifest entry of an sm90_mxfp8 variant as the build writes it, the kernels'
    symbols and shared memory made up (the stand-ins never load them).

    LEAD: this assumes the family mirrors sm90_bf16 (dglu_build.kernels.sm90_mxfp8.config.Config
    .from_key, interface.entry / kernels / tma_extents); adjust here if it does not."""
    interface = pytest.importorskip(f"dglu_build.kernels.{FAMILY}.interface", reason=f"no {FAMILY} family yet")
    config_module = pytest.importorskip(f"dglu_build.kernels.{FAMILY}.config")
    from dglu_build.kernels.declaration import manifest_kernel

    config = config_module.Config.from_key(key)
    entry = variant_entry(key, cubin, family=FAMILY, **interface.entry(config))
    entry["kernels"] = [
        manifest_kernel(kernel, f"dglu_{entry['name']}_{kernel.role}_0", 0,
                        lambda tensor: interface.tma_extents(config, tensor))
        for kernel in interface.kernels(config)
    ]
    return entry


def write_variants(directory: Path, with_blockscaled: bool) -> None:
    """Random cubins and a manifest of the BF16 defaults (and the MXFP8 keys)."""
    entries = []
    for key in DEFAULT_KEYS + (MXFP8_KEYS if with_blockscaled else []):
        cubin = os.urandom(512 + len(entries))
        entry = blockscaled_entry(key, cubin) if key["ab_dtype"] != "bf16" else variant_entry(key, cubin)
        (directory / entry["cubin"]).write_bytes(cubin)
        entries.append(entry)
    write_manifest(directory, manifest_data(entries))


@pytest.fixture(params=["without", "with"], ids=["no-mxfp8-variant", "mxfp8-variants"])
def manifest(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def recorded(manifest: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stand-ins over the manifest; (driver, runs): the driver's calls and run_variant's."""
    write_variants(tmp_path, manifest == "with")
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    runs: list[str] = []
    for module in (op, bound):
        monkeypatch.setattr(module, "load_variant", lambda v, device: LoadedVariant(v, device, ()))
    monkeypatch.setattr(bound, "run_variant", lambda loaded, *args, **kw: runs.append(loaded.variant.name))
    return fake, runs


def sf(rows: int, kc: int, l: int = 1) -> torch.Tensor:
    """An E8M0 SF tensor of scale 1 in the seed's permuted allocation."""
    return bs.sf_allocate(rows, kc, l, bs.E8M0_BIAS).view(E8M0)


def contiguous_sf(rows: int, kc: int, l: int = 1) -> torch.Tensor:
    """The seed's SF shape, but contiguous: the wrong strides."""
    return torch.full(bs.sf_shape(rows, kc, l), bs.E8M0_BIAS, dtype=torch.uint8).view(E8M0)


def fp8(*shape: int, dtype: torch.dtype = E4M3) -> torch.Tensor:
    return torch.zeros(shape).to(dtype)


def dense_b(dtype: torch.dtype = E4M3) -> torch.Tensor:
    return fp8(L, N, K, dtype=dtype).permute(1, 2, 0)


def wrapper_call() -> dict[str, Any]:
    """A valid dense MXFP8 wrapper call with dbias (e4m3 in and out, bf16 C)."""
    return dict(
        a_tensor=fp8(M, K, 1),
        c_tensor=torch.zeros(M, 2 * N, 1, dtype=BF16),
        sfa_tensor=sf(M, K),
        padded_offsets=torch.tensor([256, 256, 768, 1024], dtype=torch.int32),
        alpha_tensor=torch.ones(L),
        beta_tensor=torch.ones(L),
        prob_tensor=torch.ones(M, 1, 1),
        dprob_tensor=torch.zeros(M, 1, 1),
        b_tensor=dense_b(),
        sfb_tensor=sf(N, K, L),
        norm_const_tensor=torch.ones(1),
        d_dtype=E4M3,
        sf_vec_size=32,
        generate_dbias=True,
    )


def discrete_wrapper_call() -> dict[str, Any]:
    call = wrapper_call()
    del call["b_tensor"], call["sfb_tensor"]
    pointers = torch.arange(1, L + 1, dtype=torch.int64) * 4096
    return {**call, "b_ptrs": pointers, "sfb_ptrs": pointers + 1024, "n": N, "b_dtype": E4M3}


def class_samples() -> dict[str, Any]:
    """A valid class-API construction (dense, dbias)."""
    call = wrapper_call()
    return dict(
        sample_a=call["a_tensor"],
        sample_c=call["c_tensor"],
        sample_d_row=fp8(M, 2 * N, 1),
        sample_d_col=fp8(M, 2 * N, 1),
        sample_sfa=call["sfa_tensor"],
        sample_padded_offsets=call["padded_offsets"],
        sample_alpha=call["alpha_tensor"],
        sample_beta=call["beta_tensor"],
        sample_prob=call["prob_tensor"],
        sample_dprob=call["dprob_tensor"],
        sample_dbias=torch.zeros(L, 2 * N, 1, dtype=BF16),
        sample_b=call["b_tensor"],
        sample_sfb=call["sfb_tensor"],
        sample_sfd_row=sf(M, 2 * N),
        sample_sfd_col=sf(2 * N, M),
        sample_norm_const=call["norm_const_tensor"],
        sf_vec_size=32,
    )


def execute_arguments(samples: dict[str, Any]) -> dict[str, Any]:
    """execute()'s arguments over the samples' tensors."""
    return dict(
        a_tensor=samples["sample_a"],
        c_tensor=samples["sample_c"],
        d_row_tensor=samples["sample_d_row"],
        d_col_tensor=samples["sample_d_col"],
        sfa_tensor=samples["sample_sfa"],
        padded_offsets=samples["sample_padded_offsets"],
        alpha_tensor=samples["sample_alpha"],
        beta_tensor=samples["sample_beta"],
        prob_tensor=samples["sample_prob"],
        dprob_tensor=samples["sample_dprob"],
        dbias_tensor=samples["sample_dbias"],
        b_tensor=samples["sample_b"],
        sfb_tensor=samples["sample_sfb"],
        sfd_row_tensor=samples["sample_sfd_row"],
        sfd_col_tensor=samples["sample_sfd_col"],
        norm_const_tensor=samples["sample_norm_const"],
    )


@dataclass(frozen=True)
class Refusal:
    """One bad argument: the call it goes to, its changes, and what the message must say."""

    call: str  # "wrapper", "discrete wrapper", "check_support" (changes to the samples), "execute"
    changes: Callable[[], dict[str, Any]]
    argument: str | tuple[str, ...]  # the message starts with it (or with one of them)
    fragments: tuple[str, ...]  # what it got and what Hopper takes, as the message shows them


def change(**values: Any) -> Callable[[], dict[str, Any]]:
    return lambda: {name: value() if callable(value) else value for name, value in values.items()}


FP4 = torch.float4_e2m1fn_x2
BEFORE_SELECTION = {
    "FP4 operands (float4_e2m1fn_x2)": Refusal(
        "wrapper",
        change(a_tensor=lambda: torch.zeros(M, K // 2, 1, dtype=torch.uint8).view(FP4),
               b_tensor=lambda: torch.zeros(L, N, K // 2, dtype=torch.uint8).view(FP4).permute(1, 2, 0)),
        "a_tensor", ("float4_e2m1fn_x2", "float8_e4m3fn"),
    ),
    "FP4 operands (uint8)": Refusal(
        "wrapper",
        change(a_tensor=lambda: torch.zeros(M, K // 2, 1, dtype=torch.uint8),
               b_tensor=lambda: torch.zeros(L, N, K // 2, dtype=torch.uint8).permute(1, 2, 0)),
        "a_tensor", ("uint8", "float8_e4m3fn"),
    ),
    "E4M3 SFA": Refusal(
        "wrapper", change(sfa_tensor=lambda: sf(M, K).view(E4M3)), "sfa_tensor",
        ("float8_e4m3fn", "float8_e8m0fnu"),
    ),
    "E4M3 SFB": Refusal(
        "wrapper", change(sfb_tensor=lambda: sf(N, K, L).view(E4M3)), "sfb_tensor",
        ("float8_e4m3fn", "float8_e8m0fnu"),
    ),
    "sf_vec_size 16": Refusal("wrapper", change(sf_vec_size=16), "sf_vec_size", ("16", "32")),
    "d_dtype bf16 with FP8 A": Refusal(
        "wrapper", change(d_dtype=BF16), "d_dtype", ("bfloat16", "float8_e4m3fn")
    ),
    "d_dtype left out with FP8 A": Refusal(
        "wrapper", change(d_dtype=None), "d_dtype", ("None", "float8_e4m3fn")
    ),
    "no norm_const": Refusal(
        "wrapper", change(norm_const_tensor=None), "norm_const_tensor", ("None",)
    ),
    "no SFA": Refusal("wrapper", change(sfa_tensor=None), "sfa_tensor", ("None",)),
    "no SFB": Refusal("wrapper", change(sfb_tensor=None), "sfb_tensor", ("None",)),
    "FP8 C with vector_f32": Refusal(
        "wrapper", change(c_tensor=lambda: fp8(M, 2 * N, 1), vector_f32=True),
        ("vector_f32", "c_tensor"), ("vector_f32", "True"),
    ),
    "discrete e5m2 B with e4m3 A": Refusal(
        "discrete wrapper", change(b_dtype=E5M2), "b_dtype", ("e5m2", "e4m3")
    ),
    "class: no sample_norm_const": Refusal(
        "check_support", change(sample_norm_const=None), "sample_norm_const", ("None",)
    ),
    "class: no sample_sfd_row": Refusal(
        "check_support", change(sample_sfd_row=None), "sample_sfd_row", ("None",)
    ),
    "class: no sample_sfd_col": Refusal(
        "check_support", change(sample_sfd_col=None), "sample_sfd_col", ("None",)
    ),
    "class: sf_vec_size 16": Refusal(
        "check_support", change(sf_vec_size=16), "sf_vec_size", ("16", "32")
    ),
    "class: E4M3 sample_sfa": Refusal(
        "check_support", change(sample_sfa=lambda: sf(M, K).view(E4M3)), "sample_sfa",
        ("float8_e4m3fn", "float8_e8m0fnu"),
    ),
    # cuDNN FE 1.32.0: "round_dgrad_to_input_dtype is supported only by the BF16 kernel"
    "round_dgrad_to_input_dtype with FP8 operands": Refusal(
        "wrapper", change(round_dgrad_to_input_dtype=True), "round_dgrad_to_input_dtype",
        ("FP8 operands", "True"),
    ),
    "class: round_dgrad_to_input_dtype with FP8 operands": Refusal(
        "check_support", change(round_dgrad_to_input_dtype=True), "round_dgrad_to_input_dtype",
        ("FP8 operands", "True"),
    ),
}
WITH_VARIANT = {
    "dense e5m2 B with e4m3 A": Refusal(
        "wrapper", change(b_tensor=lambda: dense_b(E5M2)), "b_tensor", ("float8_e5m2", "float8_e4m3fn")
    ),
    "SFA of twice the K blocks": Refusal(
        "wrapper", change(sfa_tensor=lambda: sf(M, 4 * K)), "sfa_tensor",
        (str(bs.sf_shape(M, 4 * K)), str(bs.sf_shape(M, K))),
    ),
    "SFB of one expert less": Refusal(
        "wrapper", change(sfb_tensor=lambda: sf(N, K, L - 1)), "sfb_tensor",
        (str(bs.sf_shape(N, K, L - 1)), str(bs.sf_shape(N, K, L))),
    ),
    "SFA contiguous": Refusal(
        "wrapper", change(sfa_tensor=lambda: contiguous_sf(M, K)), "sfa_tensor",
        (str(contiguous_sf(M, K).stride()), str(bs.sf_strides(M, K))),
    ),
    "SFB contiguous": Refusal(
        "wrapper", change(sfb_tensor=lambda: contiguous_sf(N, K, L)), "sfb_tensor",
        (str(contiguous_sf(N, K, L).stride()), str(bs.sf_strides(N, K, L))),
    ),
    "single-group offsets with 4 experts": Refusal(
        "wrapper", change(use_single_group_runtime_offsets=True), "use_single_group_runtime_offsets",
        ("4", "1"),
    ),
    "single-group offsets with 4 experts before m_aligned": Refusal(
        "wrapper", change(use_single_group_runtime_offsets=True, m_aligned=128), "use_single_group_runtime_offsets",
        ("4", "1"),
    ),
    "execute: SFD_row contiguous": Refusal(
        "execute", change(sfd_row_tensor=lambda: contiguous_sf(M, 2 * N)), "sfd_row_tensor",
        (str(contiguous_sf(M, 2 * N).stride()), str(bs.sf_strides(M, 2 * N))),
    ),
    "execute: SFD_col of SFD_row's shape": Refusal(
        "execute", change(sfd_col_tensor=lambda: sf(M, 2 * N)), "sfd_col_tensor",
        (str(bs.sf_shape(M, 2 * N)), str(bs.sf_shape(2 * N, M))),
    ),
    "execute: fp32 dbias": Refusal(
        "execute", change(dbias_tensor=lambda: torch.zeros(L, 2 * N, 1)), "dbias_tensor",
        ("float32", "bfloat16"),
    ),
    "class: fp32 sample_dbias": Refusal(
        "check_support", change(sample_dbias=lambda: torch.zeros(L, 2 * N, 1)), "sample_dbias",
        ("float32", "bfloat16"),
    ),
}


def arguments_and_call(refusal: Refusal) -> tuple[dict[str, Any], Callable[..., Any]]:
    """The call's arguments with the refusal's changes, and what to call with them."""
    changes = refusal.changes()
    if refusal.call in ("wrapper", "discrete wrapper"):
        base = wrapper_call() if refusal.call == "wrapper" else discrete_wrapper_call()
        return {**base, **changes}, api.grouped_gemm_dglu
    if refusal.call == "check_support":
        return {**class_samples(), **changes}, lambda **kw: api.GroupedGemmDglu(**kw).check_support()
    samples = class_samples()
    op = api.GroupedGemmDglu(**samples)
    op.compile()
    return {**execute_arguments(samples), **changes}, op.execute


def no_family(refusal: Refusal, arguments: dict[str, Any]) -> Refusal | None:
    """Without MXFP8 variants no installed family runs FP8 A on Hopper: what the call with
    ``arguments`` is refused for first then (the front policy of a family is its manifest
    entries' data), or None when A is not FP8 (FP4 is refused by the BF16 family's data)."""
    name = "sample_a" if refusal.call == "check_support" else "a_tensor"
    a = arguments.get(name)
    if refusal.call == "execute" or not isinstance(a, torch.Tensor) or a.dtype not in (E4M3, E5M2):
        return None
    return Refusal(refusal.call, refusal.changes, name, (str(a.dtype), "no family on sm_90a runs it",
                                                          "installed families run torch.bfloat16"))


def check_refused(refusal: Refusal, recorded, manifest: str = "with") -> None:
    """The call raises ValueError as ``refusal`` says (without MXFP8 variants, FP8 A is
    refused first: ``no_family``); nothing allocated on the device, launched or written."""
    fake, runs = recorded
    arguments, call = arguments_and_call(refusal)
    if manifest == "without":
        refusal = no_family(refusal, arguments) or refusal
    before = {name: v.clone() for name, v in arguments.items() if isinstance(v, torch.Tensor)}
    allocations, enqueued = fake.allocations(), len(fake.enqueued())
    with pytest.raises((ValueError, VariantNotFoundError)) as raised:
        call(**arguments)
    message = str(raised.value)
    starts = (refusal.argument,) if isinstance(refusal.argument, str) else refusal.argument
    assert message.startswith(tuple(f"{name}:" for name in starts)), message
    for fragment in refusal.fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert runs == [] and fake.allocations() == allocations
    assert len(fake.enqueued()) == enqueued
    for name, copy in before.items():
        assert torch.equal(raw(arguments[name]), raw(copy)), f"{name} was written"


def raw(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor comparable with torch.equal: 1-byte (FP8, FP4, E8M0) elements as their bytes."""
    return tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor


@pytest.mark.parametrize("case", sorted(BEFORE_SELECTION))
def test_refused_before_the_variant_selection(recorded, manifest: str, case: str) -> None:
    check_refused(BEFORE_SELECTION[case], recorded, manifest)


@pytest.mark.parametrize("case", sorted(WITH_VARIANT))
def test_refused_against_the_variant(recorded, manifest: str, case: str) -> None:
    if manifest == "without":
        pytest.skip("needs the sm90_mxfp8 variant's argument rules")
    check_refused(WITH_VARIANT[case], recorded)


def test_the_valid_calls_run(recorded, manifest: str) -> None:
    """The baseline of every refusal: unchanged, the calls run (needs the variants)."""
    if manifest == "without":
        pytest.skip("needs the sm90_mxfp8 variants")
    _, runs = recorded
    api.grouped_gemm_dglu(**wrapper_call())
    samples = class_samples()
    op = api.GroupedGemmDglu(**samples)
    assert op.check_support() is True
    op.execute(**execute_arguments(samples))
    assert len(runs) == 2
