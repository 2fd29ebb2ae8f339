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
from dglu.errors import VariantNotFoundError  # noqa: E402
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


def _stand_ins(info: driver.DeviceInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra_keys: dict):
    """The stand-ins over a manifest of one sm_100a NVFP4 variant, one sm_100a MXFP8 variant,
    one sm_90a BF16 variant and the sm_100a ``extra_keys``, on the device ``info``; (driver, runs)."""
    entries = []
    made = ((_entry, NVFP4_KEY), (_entry, MXFP8_KEY), (variant_entry, variant_key()), *((_entry, k) for k in extra_keys))
    for make_entry, key in made:
        cubin = os.urandom(512)
        entries.append(make_entry(key, cubin))
        (tmp_path / entries[-1]["cubin"]).write_bytes(cubin)
    write_manifest(tmp_path, manifest_data(entries))
    variants = read_manifest(tmp_path).variants
    fake = stand_ins.install(monkeypatch, variants, tmp_path)
    for module in (driver, call, runner):
        monkeypatch.setattr(module, "device_info", lambda ordinal: info)
    monkeypatch.setattr(manifest, "installed_variants", lambda arch=None: stand_ins.of_arch(variants, arch))
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
    allocations = fake.allocations()
    with pytest.raises(ValueError) as raised:
        api.grouped_gemm_dglu(**_call(**changes))
    assert str(raised.value).startswith(f"{argument}:") and fragment in str(raised.value), str(raised.value)
    assert runs == [] and fake.allocations() == allocations


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
        ({"discrete_col_sfd": 1}, "discrete_col_sfd", "expected a bool"),
        ({"use_single_group_runtime_offsets": True}, "use_single_group_runtime_offsets", "needs exactly one expert"),
    ],
)
def test_blackwell_mxfp8_refusals_come_from_its_own_policy(b200, changes, argument, fragment):
    fake, runs = b200
    with pytest.raises(ValueError) as raised:
        api.grouped_gemm_dglu(**_mxfp8_call(**changes))
    assert str(raised.value).startswith(f"{argument}:") and fragment in str(raised.value), str(raised.value)
    assert runs == [] and fake.allocations() == 0


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
    assert runs == [] and fake.allocations() == 0


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
    assert runs == [] and fake.allocations() == 0


# discrete_col_sfd and use_single_group_runtime_offsets: cuDNN FE's kernel compiles them in,
# so each selects the variants of its key field (the front policy's compiled_options)
DCS_KEY = {**MXFP8_KEY, "discrete_col_sfd": True}
SGO_KEY = {**MXFP8_KEY, "use_single_group_runtime_offsets": True, "experts": 1}


DENSE_N_KEY = {**MXFP8_KEY, "b_major": "n"}  # N-major dense B: built as cuDNN FE's default path compiles it


@pytest.fixture
def b200_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    return _stand_ins(B200, tmp_path, monkeypatch, DCS_KEY, SGO_KEY, DENSE_N_KEY)


def test_an_n_major_dense_b_selects_the_n_major_variant_by_its_strides(b200_options):
    fake, runs = b200_options
    n_major = torch.zeros(L, K, N, dtype=E4M3).permute(2, 1, 0)  # (N, K, L), N contiguous
    api.grouped_gemm_dglu(**_mxfp8_call(b_tensor=n_major))
    assert runs == [variant_entry(DENSE_N_KEY, b"")["name"]]


def _one_expert(**changes) -> dict:
    """The MXFP8 call with one expert of all M rows (padded_offsets (1,), never read)."""
    sf = _mxfp8_call()["sfb_tensor"][..., :1]
    return _mxfp8_call(padded_offsets=torch.tensor([M], dtype=torch.int32), alpha_tensor=torch.ones(1),
                       beta_tensor=torch.ones(1), b_tensor=torch.zeros(1, N, K, dtype=E4M3).permute(1, 2, 0),
                       sfb_tensor=sf, **changes)


@pytest.mark.parametrize(("changes", "key"), [({"discrete_col_sfd": True}, DCS_KEY), ({}, MXFP8_KEY)])
def test_discrete_col_sfd_selects_the_variant_that_compiles_it_in(b200_options, changes, key):
    fake, runs = b200_options
    *_, sfd_col = api.grouped_gemm_dglu(**_mxfp8_call(**changes))
    assert runs == [variant_entry(key, b"")["name"]]
    assert sfd_col.shape == (32, 4, -(-2 * N // 128), 4, M // 128, 1)  # the seed's shape in both layouts


@pytest.mark.parametrize(("changes", "key"), [
    ({"use_single_group_runtime_offsets": True}, SGO_KEY),
    ({"use_single_group_runtime_offsets": True, "discrete_col_sfd": False}, SGO_KEY),
])
def test_single_group_offsets_select_the_one_expert_variant_that_compiles_them_in(b200_options, changes, key):
    fake, runs = b200_options
    api.grouped_gemm_dglu(**_one_expert(**changes))
    assert runs == [variant_entry(key, b"")["name"]]


def test_a_one_expert_call_without_the_option_finds_no_variant_and_is_told_how_to_build_it(b200_options):
    fake, runs = b200_options
    with pytest.raises(VariantNotFoundError) as raised:
        api.grouped_gemm_dglu(**_one_expert())
    assert "use_single_group_runtime_offsets=True" in str(raised.value)  # the nearest variant's difference
    assert "--experts 1" in str(raised.value) and "--use-single-group-runtime-offsets" not in str(raised.value)
    assert runs == [] and fake.allocations() == 0


def test_discrete_col_sfd_without_its_variant_names_the_option_and_the_build_command(b200):
    fake, runs = b200
    with pytest.raises(VariantNotFoundError) as raised:
        api.grouped_gemm_dglu(**_mxfp8_call(discrete_col_sfd=True))
    message = str(raised.value)
    assert "discrete_col_sfd=True (from discrete_col_sfd)" in message and "--discrete-col-sfd" in message
    assert runs == [] and fake.allocations() == 0


def test_nvfp4_refuses_discrete_col_sfd_naming_it(b200):
    fake, runs = b200
    with pytest.raises(ValueError) as raised:
        api.grouped_gemm_dglu(**_call(discrete_col_sfd=True))
    assert str(raised.value).startswith("discrete_col_sfd:") and "no SFD_col" in str(raised.value)
    assert runs == [] and fake.allocations() == 0


def _e8m0(rows: int, kc: int, l: int = 1) -> torch.Tensor:
    """Empty MXFP8 scale factors (E8M0 per 32 of ``kc``) in the seed's permuted layout."""
    return torch.zeros((l, -(-rows // 128), -(-kc // 128), 32, 4, 4), dtype=torch.uint8).view(E8M0).permute(
        3, 4, 1, 5, 2, 0)


def test_the_class_api_selects_the_single_group_variant(b200_options):
    fake, runs = b200_options
    call = _one_expert()
    samples = {"sample_a": call["a_tensor"], "sample_c": call["c_tensor"],
               "sample_d_row": torch.zeros(M, 2 * N, 1, dtype=E4M3), "sample_d_col": torch.zeros(M, 2 * N, 1, dtype=E4M3),
               "sample_sfa": call["sfa_tensor"], "sample_b": call["b_tensor"], "sample_sfb": call["sfb_tensor"],
               "sample_sfd_row": _e8m0(M, 2 * N), "sample_sfd_col": _e8m0(2 * N, M),
               "sample_padded_offsets": call["padded_offsets"], "sample_alpha": call["alpha_tensor"],
               "sample_beta": call["beta_tensor"], "sample_prob": call["prob_tensor"],
               "sample_dprob": call["dprob_tensor"], "sample_dbias": torch.zeros(1, 2 * N, 1, dtype=torch.bfloat16),
               "sample_norm_const": torch.ones(1), "sf_vec_size": 32, "mma_tiler_mn": (256, 256),
               "use_single_group_runtime_offsets": True}
    op_ = api.GroupedGemmDglu(**samples)
    assert op_.check_support()
    assert op_._variant.name == variant_entry(SGO_KEY, b"")["name"]
    assert runs == [] and fake.allocations() == 0


def test_the_front_policy_names_the_compiled_options_and_the_reader_checks_them():
    from dglu.contract.element_types import ELEMENT_TYPES
    from dglu.contract.errors import ManifestError
    from dglu.contract.front import front_json, read_front

    data = front_json(interface.FRONTS["mxfp8"])
    assert read_front(data, "entry", ELEMENT_TYPES).compiled_options == (
        "discrete_col_sfd", "use_single_group_runtime_offsets")
    assert read_front({k: v for k, v in data.items() if k != "compiled_options"}, "e", ELEMENT_TYPES).compiled_options == ()
    for bad in (["experts"], ["no_such_field"], "discrete_col_sfd", ["discrete_col_sfd", "discrete_col_sfd"]):
        with pytest.raises(ManifestError, match="compiled_options"):
            read_front({**data, "compiled_options": bad}, "entry", ELEMENT_TYPES)


def test_the_wrappers_amax_starts_at_minus_infinity_and_its_dbias_at_zero(tmp_path, monkeypatch):
    """cuDNN FE's wrapper allocates amax full of -inf and the kernel only max-reduces into it
    (an expert with no rows keeps -inf): dglu's wrapper fills its new amax with -inf's bits
    on the call's stream, before the launch, and zeroes its new dbias, through the real
    runner on the stand-in driver."""
    fake, _ = _stand_ins(B200, tmp_path, monkeypatch)
    monkeypatch.setattr(bound, "run_variant", runner.run_variant)
    for module in (op, bound):
        monkeypatch.setattr(module, "load_variant", runner.load_variant)
    monkeypatch.setattr(runner, "max_active_clusters", lambda function, kernel: B200.sm_count // 2)
    out = api.grouped_gemm_dglu(**_call())
    amax, dbias = out[4], out[3]
    memsets = {args[0]: args[1:3] for args in fake.names("cuMemsetD32Async")}
    assert memsets[amax.data_ptr()] == (0xFF800000, L * 2)  # -inf as float32, L x 2 words
    assert memsets[dbias.data_ptr()] == (0, L * 2 * N // 2)  # bf16 zeros, in 32-bit words
    order = [args[0] if name.startswith("cuMemset") else name for name, args in fake.calls
             if name in ("cuMemsetD32Async", "cuLaunchKernelEx")]
    first_launch = order.index("cuLaunchKernelEx")
    assert order.index(amax.data_ptr()) < first_launch and order.index(dbias.data_ptr()) < first_launch
