"""The wrapper's front door for Blackwell block-scaled calls, on the CPU stand-ins
(stand_ins.py: a fake device and driver; the variants' manifest entries are the
sm100_blockscaled family's declaration with made-up cubins and symbols): FP4 operands,
E4M3 scales and sf_vec_size=16 are accepted where an installed variant of the device's
architecture takes FP4 operands, and refused on Hopper, each refusal naming the argument
before anything is allocated or launched; an NVFP4 call returns the seed's seven outputs
with amax allocated (and no D_col or SFD: its kernel quantizes no D); the class API
selects the same variant from FP4 samples."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import stand_ins  # noqa: E402
from conftest_runtime import variant_entry, variant_key, write_manifest  # noqa: E402
from dglu.contract.writer import manifest_data  # noqa: E402
from dglu import api, bound, call, driver, manifest, op, runner  # noqa: E402
from dglu.contract.reader import read_manifest  # noqa: E402
from dglu.runner import LoadedVariant  # noqa: E402
from dglu_build.kernels.declaration import manifest_kernel  # noqa: E402
from dglu_build.kernels.sm100_blockscaled import FAMILY, interface  # noqa: E402
from dglu_build.kernels.sm100_blockscaled.config import Config  # noqa: E402

M, N, K, L = 1024, 96, 256, 4  # K values: FP4 rows of K/2 bytes
B200 = driver.DeviceInfo(0, "NVIDIA B200", (10, 0), 148, 232_448)
FP4, E4M3, E8M0 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn, torch.float8_e8m0fnu
NVFP4_KEY = variant_key(arch="sm_100a", ab_dtype="e2m1x2", d_dtype="bf16", dbias=True, tile_m=256, tile_n=256,
                        cluster_m=2, experts=L)
MXFP8_KEY = {**NVFP4_KEY, "ab_dtype": "e4m3", "d_dtype": "e4m3"}


def _entry(key: dict, cubin: bytes) -> dict:
    config = Config.from_key(key)
    entry = variant_entry(key, cubin, family=FAMILY.name, **interface.entry(config))
    entry["kernels"] = [manifest_kernel(k, f"dglu_{entry['name']}_{k.role}_0", 1024, lambda tensor: [])
                        for k in interface.kernels(config)]
    return entry


def _stand_ins(info: driver.DeviceInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stand-ins over a manifest of one sm_100a NVFP4 variant, one sm_100a MXFP8 variant
    and one sm_90a BF16 variant, on the device ``info``; (driver, runs)."""
    entries = []
    for make_entry, key in ((_entry, NVFP4_KEY), (_entry, MXFP8_KEY), (variant_entry, variant_key())):
        cubin = os.urandom(512)
        entries.append(make_entry(key, cubin))
        (tmp_path / entries[-1]["cubin"]).write_bytes(cubin)
    write_manifest(tmp_path, manifest_data(entries))
    variants = read_manifest(tmp_path).variants
    fake = stand_ins.install(monkeypatch, variants, tmp_path)
    for module in (driver, call, runner):
        monkeypatch.setattr(module, "device_info", lambda ordinal: info)
    monkeypatch.setattr(manifest, "installed_variants", lambda: tuple(variants))
    runs: list[str] = []
    for module in (op, bound):
        monkeypatch.setattr(module, "load_variant", lambda v, device: LoadedVariant(v, device, ()))
    monkeypatch.setattr(bound, "run_variant", lambda loaded, *args, **kw: runs.append(loaded.variant.name))
    return fake, runs


@pytest.fixture
def b200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return _stand_ins(B200, tmp_path, monkeypatch)


@pytest.fixture
def h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return _stand_ins(stand_ins.H200, tmp_path, monkeypatch)


def _sf(rows: int, kc: int, l: int = 1, dtype=E4M3) -> torch.Tensor:
    rest = -(-(-(-kc // 16)) // 4)
    return torch.zeros((l, -(-rows // 128), rest, 32, 4, 4), dtype=torch.uint8).view(dtype).permute(3, 4, 1, 5, 2, 0)


def _call(**changes) -> dict:
    """A valid dense NVFP4 wrapper call with dbias (bf16 C and D)."""
    made = dict(
        a_tensor=torch.zeros(M, K // 2, 1, dtype=torch.uint8).view(FP4),
        c_tensor=torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16),
        sfa_tensor=_sf(M, K),
        padded_offsets=torch.tensor([256, 256, 768, 1024], dtype=torch.int32),
        alpha_tensor=torch.ones(L), beta_tensor=torch.ones(L), prob_tensor=torch.ones(M, 1, 1),
        dprob_tensor=torch.zeros(M, 1, 1),
        b_tensor=torch.zeros(L, N, K // 2, dtype=torch.uint8).view(FP4).permute(1, 2, 0),
        sfb_tensor=_sf(N, K, L),
        sf_vec_size=16, generate_dbias=True, mma_tiler_mn=(256, 256),
    )
    return {**made, **changes}


def test_an_nvfp4_call_runs_on_blackwell_and_returns_amax(b200):
    fake, runs = b200
    out = api.grouped_gemm_dglu(**_call())
    assert runs == [variant_entry(NVFP4_KEY, b"")["name"]]
    d_row, d_col, dprob, dbias, amax, sfd_row, sfd_col = out
    assert d_row.shape == (M, 2 * N, 1) and d_row.dtype == torch.bfloat16
    assert amax.shape == (L, 2, 1) and amax.dtype == torch.float32
    assert dbias.shape == (L, 2 * N, 1)
    assert d_col is sfd_row is sfd_col is None


@pytest.mark.parametrize(
    ("changes", "argument", "fragment"),
    [
        ({"sf_vec_size": 32}, "sf_vec_size", "one E4M3 scale per 16"),
        ({"sfa_tensor": _sf(M, K, dtype=E8M0)}, "sfa_tensor", "expected torch.float8_e4m3fn scale factors, one per 16"),
        ({"a_tensor": torch.zeros(M, K // 2, 1, dtype=torch.uint8)}, "a_tensor", "torch.float4_e2m1fn_x2"),
        ({"d_dtype": torch.float8_e4m3fn}, "d_dtype", ""),
    ],
)
def test_blackwell_refuses_what_nvfp4_does_not_take(b200, changes, argument, fragment):
    fake, runs = b200
    allocations = fake.counts["cuMemAllocAsync"]
    with pytest.raises(ValueError) as raised:
        api.grouped_gemm_dglu(**_call(**changes))
    assert str(raised.value).startswith(f"{argument}:") and fragment in str(raised.value), str(raised.value)
    assert runs == [] and fake.counts["cuMemAllocAsync"] == allocations


def _mxfp8_call(**changes) -> dict:
    """A valid dense MXFP8 wrapper call with dbias (bf16 C, e4m3 D)."""
    sf = lambda rows, l=1: torch.zeros((l, -(-rows // 128), -(-K // 128), 32, 4, 4), dtype=torch.uint8).view(
        E8M0).permute(3, 4, 1, 5, 2, 0)
    made = dict(
        _call(), a_tensor=torch.zeros(M, K, 1, dtype=E4M3), sfa_tensor=sf(M),
        b_tensor=torch.zeros(L, N, K, dtype=E4M3).permute(1, 2, 0), sfb_tensor=sf(N, L),
        norm_const_tensor=torch.ones(1), sf_vec_size=32, d_dtype=torch.float8_e4m3fn,
    )
    return {**made, **changes}


@pytest.mark.parametrize(
    ("changes", "argument", "fragment"),
    [
        ({"sf_vec_size": 16}, "sf_vec_size", "one E8M0 scale per 32"),
        ({"d_dtype": torch.float8_e5m2}, "d_dtype", "e5m2 D does not build"),
        ({"norm_const_tensor": None}, "norm_const_tensor", "required with FP8 operands"),
        ({"discrete_col_sfd": True}, "discrete_col_sfd", "no key field yet"),
    ],
)
def test_blackwell_mxfp8_refusals_come_from_its_own_policy(b200, changes, argument, fragment):
    fake, runs = b200
    with pytest.raises(ValueError) as raised:
        api.grouped_gemm_dglu(**_mxfp8_call(**changes))
    assert str(raised.value).startswith(f"{argument}:") and fragment in str(raised.value), str(raised.value)
    assert runs == [] and fake.counts["cuMemAllocAsync"] == 0


def test_an_mxfp8_call_runs_on_blackwell_with_its_quantized_outputs(b200):
    fake, runs = b200
    d_row, d_col, dprob, dbias, amax, sfd_row, sfd_col = api.grouped_gemm_dglu(**_mxfp8_call())
    assert runs == [variant_entry(MXFP8_KEY, b"")["name"]]
    assert d_row.dtype == d_col.dtype == torch.float8_e4m3fn and d_row.shape == d_col.shape == (M, 2 * N, 1)
    assert sfd_row is not None and sfd_col is not None and amax is None


def test_hopper_refuses_fp4_naming_the_argument_before_anything_else(h200):
    fake, runs = h200
    with pytest.raises(ValueError) as raised:
        api.grouped_gemm_dglu(**_call(sf_vec_size=32, sfa_tensor=None))
    assert str(raised.value).startswith("a_tensor:") and "no FP4 tensor cores on Hopper" in str(raised.value)
    assert runs == [] and fake.counts["cuMemAllocAsync"] == 0


def test_the_class_api_takes_fp4_samples_on_blackwell(b200):
    fake, runs = b200
    call = _call()
    samples = {"sample_a": call["a_tensor"], "sample_c": call["c_tensor"],
               "sample_d_row": torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16), "sample_sfa": call["sfa_tensor"],
               "sample_b": call["b_tensor"], "sample_sfb": call["sfb_tensor"],
               "sample_padded_offsets": call["padded_offsets"], "sample_alpha": call["alpha_tensor"],
               "sample_beta": call["beta_tensor"], "sample_prob": call["prob_tensor"],
               "sample_dprob": call["dprob_tensor"], "sample_dbias": torch.zeros(L, 2 * N, 1, dtype=torch.bfloat16),
               "sample_amax": torch.zeros(L, 2, 1), "sf_vec_size": 16, "mma_tiler_mn": (256, 256)}
    op_ = api.GroupedGemmDglu(**samples)
    assert op_.check_support()
    assert op_._variant.name == variant_entry(NVFP4_KEY, b"")["name"]
    assert runs == [] and fake.counts["cuMemAllocAsync"] == 0
