"""The sm100_blockscaled family: found as a plugin, its key checks (cuDNN FE's block-scaled
rules for what a key fixes), its manifest declaration (read by the runtime's reader), the
runtime's refusals made from it; and, compiled (slow tier), each kind of variant against
its own cubin: ABI 8 of its architecture, the symbols, every declared parameter's size and
offset against KPARAM_INFO, the block, shared memory within capacity, and the one stack
frame it has (the MXFP8 kernel's declared local array, shown to be no spill)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dglu.contract.keys import ACT_PARAM_DEFAULTS, KEY_FIELD_DEFAULTS, variant_name
from dglu.contract.reader import parse_manifest
from dglu.contract.writer import manifest_data
from dglu_build.kernels import cudnn_fe as upstream
from dglu_build.kernels.declaration import manifest_kernel
from dglu_build.kernels.registry import families, family_for
from dglu_build.kernels.sm100_blockscaled import FAMILY, interface
from dglu_build.kernels.sm100_blockscaled.config import SFD_FRAME_BYTES, Config
from dglu_build.specs import SpecError, parse_specs

torch = pytest.importorskip("torch")

KEY = {
    **KEY_FIELD_DEFAULTS,
    "arch": "sm_100a", "ab_dtype": "e4m3", "c_dtype": "bf16", "d_dtype": "e4m3", "act_func": "dswiglu",
    "act_params": {}, "dbias": False, "weight_mode": "dense", "b_major": "k", "tile_m": 256, "tile_n": 256,
    "cluster_m": 2, "cluster_n": 1, "scheduler": "static", "experts": 8,
}
NVFP4 = {"ab_dtype": "e2m1x2", "d_dtype": "bf16"}


def test_the_registry_finds_the_family_for_fp8_and_fp4_operands_on_blackwell_only():
    assert families()["sm100_blockscaled"] is FAMILY
    for arch in ("sm_100a", "sm_103a"):
        for ab in ("e4m3", "e5m2", "e2m1x2"):
            assert family_for({"arch": arch, "ab_dtype": ab}) is FAMILY
    assert family_for({"arch": "sm_90a", "ab_dtype": "e4m3"}).name == "sm90_mxfp8"
    with pytest.raises(ValueError, match="no kernel family builds"):
        family_for({"arch": "sm_90a", "ab_dtype": "e2m1x2"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"d_dtype": "bf16"}, "d_dtype: MXFP8 operands (e4m3) write D as ['e4m3']"),
        ({"d_dtype": "e5m2"}, "e5m2 D fails in cuDNN FE 1.32.0's own compile"),
        ({**NVFP4, "d_dtype": "e4m3"}, "d_dtype: NVFP4 operands (e2m1x2) write D as ['bf16', 'fp16', 'fp32']"),
        ({**NVFP4, "d_dtype": "fp32"}, "d_dtype: FP4 operands with fp32 D need dbias"),
        ({**NVFP4, "weight_mode": "discrete", "b_major": "n"}, "b_major: FP4 B must be K-major"),
        ({**NVFP4, "b_major": "n"}, "b_major: FP4 B must be K-major"),  # dense too (FP8 dense N-major builds)
        ({**NVFP4, "discrete_col_sfd": True}, "discrete_col_sfd: only MXFP8 variants with FP8 D write SFD_col"),
        ({"use_single_group_runtime_offsets": True}, "use_single_group_runtime_offsets: needs experts 1"),
        ({"experts": 0}, "experts: the kernel compiles its expert count in"),
        ({"tile_m": 128, "cluster_m": 2}, "cluster_m: a 128-row tile runs on one CTA"),
        ({"act_func": "dsituglu", "act_params": {"situ_beta1": 0.0, "situ_beta2": 25.0}}, "situ_beta1 > 0"),
    ],
)
def test_check_refuses_what_the_kernel_does_not_build(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FAMILY.check({**KEY, **change})


def test_check_takes_the_compiled_in_options_and_n_major_dense_b():
    for change in ({"discrete_col_sfd": True}, {"use_single_group_runtime_offsets": True, "experts": 1},
                   {"b_major": "n"}, {"b_major": "n", "ab_dtype": "e5m2", "discrete_col_sfd": True}):
        FAMILY.check({**KEY, **change})
    assert families()["sm100_bf16"].allowed["discrete_col_sfd"] == (False,)
    assert FAMILY.allowed["use_single_group_runtime_offsets"] == (False, True)


def _spec(**change) -> str:
    fields = {k: v for k, v in {**KEY, **change}.items() if k not in ("act_params", "deterministic", "act_out")}
    text = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in fields.items())
    return f"variants:\n  - {{{text}}}\n"


def test_spec_files_refuse_values_the_family_does_not_allow():
    with pytest.raises(SpecError, match=r"fields \(tile_m, tile_n\): got \(128, 128\)"):
        parse_specs(_spec(tile_m=128, tile_n=128, cluster_m=1))
    (variant,) = parse_specs(_spec(**NVFP4))
    assert variant.name == variant_name({**KEY, **NVFP4}) == "sm100a_e2m1x2_bf16_bf16_dswiglu_nodbias_dense_k_256x256_2x1_static_e8"


def test_sources_hash_the_pinned_distribution_and_the_family_package():
    sources = FAMILY.sources()
    assert sources[f"{upstream.DISTRIBUTION}:version"] == upstream.VERSION
    assert f"{upstream.DISTRIBUTION}:cudnn/gemm/cutedsl/grouped/dglu/moe_blockscaled_grouped_gemm_dglu_dbias.py" in sources
    assert "sm100_blockscaled/compile.py" in sources and "scale_factors.py" in sources
    # the BF16 family's compile, config and interface it imports: a change there rebuilds it
    assert "sm100_bf16/compile.py" in sources and "sm100_bf16/interface.py" in sources
    assert FAMILY.sources_hash() != families()["sm100_bf16"].sources_hash()
    assert set(FAMILY.notices()) == {f"{upstream.DISTRIBUTION}/LICENSE.txt", f"{upstream.DISTRIBUTION}/NOTICE"}


def test_the_declaration_follows_the_recipe():
    mx = FAMILY.declare(KEY)
    assert {"sfa", "sfb", "d_col", "sfd_row", "sfd_col", "norm_const"} <= set(mx["arguments"]) and "amax" not in mx["arguments"]
    assert mx["arguments"]["sfa"]["dtypes"] == ["e8m0"] and mx["arguments"]["a"]["dtypes"] == ["e4m3"]
    assert mx["scalars"]["k_atoms"] == "k_values/128"
    nv = FAMILY.declare({**KEY, **NVFP4})
    assert {"d_col", "sfd_row", "sfd_col", "norm_const"}.isdisjoint(nv["arguments"]) and "amax" in nv["arguments"]
    assert nv["arguments"]["a"]["dtypes"] == ["e2m1x2"] and nv["arguments"]["sfb"]["dtypes"] == ["e4m3"]
    assert (nv["scalars"]["k_values"], nv["scalars"]["k_atoms"]) == ("2*k", "k_values/64")  # k counts FP4 pairs
    assert nv["tma"]["a"]["box"] == [128, 128]  # 128 bytes (256 FP4 values) along K
    discrete = FAMILY.declare({**KEY, "weight_mode": "discrete", "scheduler": "dynamic", "experts": 16})
    assert discrete["workspaces"]["workspace"]["count"] * 8 == 2 * 128 * 16 + 128  # B and SFB per expert, the counter
    assert discrete["views"]["sfb_atoms"]["of"] == "sfb_ptrs" and discrete["views"]["b_expert"]["of"] == "b_ptrs"


def test_the_local_frame_is_declared_for_the_mxfp8_main_kernel_only():
    assert FAMILY.local_frame_bytes(KEY, "main") == SFD_FRAME_BYTES == 48
    assert FAMILY.local_frame_bytes(KEY, "helper") == 0
    assert FAMILY.local_frame_bytes({**KEY, **NVFP4}, "main") == 0
    assert families()["sm100_bf16"].local_frame_bytes({**KEY, "ab_dtype": "bf16"}, "main") == 0


def _variant(tmp_path: Path, key: dict):
    """The variant as the runtime reads it: the family's declaration, kernels of stand-in symbols."""
    config = Config.from_key(key)
    kernels = [manifest_kernel(kernel, f"k_{kernel.role}", 1024, lambda tensor: []) for kernel in interface.kernels(config)]
    entry = {
        "name": variant_name(key), "family": FAMILY.name, "key": key, "cubin": "x.cubin", "sha256": "0" * 64,
        "size": 1, "build": {"dglu_version": "0", "source_hash": "0" * 64, "toolchain": {}}, "min_driver": 13000,
        **FAMILY.declare(key), "kernels": kernels,
    }
    (variant,) = parse_manifest(manifest_data([entry]), tmp_path / "manifest.json").variants
    return variant


@pytest.mark.parametrize(
    "change",
    [{}, NVFP4, {"weight_mode": "discrete", "scheduler": "dynamic", "dbias": True},
     {**NVFP4, "weight_mode": "discrete", "dbias": True, "act_func": "dsituglu",
      "act_params": ACT_PARAM_DEFAULTS["dsituglu"]}],
)
def test_the_runtime_reads_the_declaration(tmp_path, change):
    variant = _variant(tmp_path, {**KEY, **change})
    assert variant.family == FAMILY.name
    (main,) = [kernel for kernel in variant.kernels if kernel.role == "main"]
    assert main.params[0].kind == main.params[1].kind == "zeros"


def _sf(rows: int, cols: int, groups: int, vec: int, dtype) -> torch.Tensor:
    rest = -(-(-(-cols // vec)) // 4)
    base = torch.zeros((groups, -(-rows // 128), rest, 32, 4, 4), dtype=torch.uint8).view(dtype)
    return base.permute(3, 4, 1, 5, 2, 0)


def _tensors(m=1024, n=512, k=1024, experts=8, fp4=False, sf_dtype=None, a_dtype=None):
    """The seed's tensors of a block-scaled call (CPU): k in values; FP4 two a byte."""
    ab = torch.float4_e2m1fn_x2 if fp4 else torch.float8_e4m3fn
    sf = sf_dtype or (torch.float8_e4m3fn if fp4 else torch.float8_e8m0fnu)
    vec, k_storage = (16, k // 2) if fp4 else (32, k)
    byte = lambda shape, dtype: torch.zeros(shape, dtype=torch.uint8).view(dtype)  # noqa: E731
    d = torch.bfloat16 if fp4 else torch.float8_e4m3fn
    made = {
        "a": ("a_tensor", byte((m, k_storage, 1), a_dtype or ab)),
        "sfa": ("sfa_tensor", _sf(m, k, 1, vec, sf)),
        "b": ("b_tensor", byte((experts, n, k_storage), ab).permute(1, 2, 0)),
        "sfb": ("sfb_tensor", _sf(n, k, experts, vec, sf)),
        "c": ("c_tensor", torch.zeros((m, 2 * n, 1), dtype=torch.bfloat16)),
        "d_row": ("d_row_tensor", byte((m, 2 * n, 1), d) if not fp4 else torch.zeros((m, 2 * n, 1), dtype=d)),
        "padded_offsets": ("padded_offsets", torch.zeros((experts,), dtype=torch.int32)),
        "alpha": ("alpha_tensor", torch.zeros((experts,), dtype=torch.float32)),
        "beta": ("beta_tensor", torch.zeros((experts,), dtype=torch.float32)),
        "prob": ("prob_tensor", torch.zeros((m, 1, 1), dtype=torch.float32)),
        "dprob": ("dprob_tensor", torch.zeros((m, 1, 1), dtype=torch.float32)),
    }
    if fp4:
        made["amax"] = ("amax_tensor", torch.zeros((experts, 2, 1), dtype=torch.float32))
    else:
        made.update({
            "d_col": ("d_col_tensor", byte((m, 2 * n, 1), d)),
            "sfd_row": ("sfd_row_tensor", _sf(m, 2 * n, 1, vec, sf)),
            "sfd_col": ("sfd_col_tensor", _sf(2 * n, m, 1, vec, sf)),
            "norm_const": ("norm_const_tensor", torch.zeros((1,), dtype=torch.float32)),
        })
    return made


@pytest.mark.parametrize("fp4", [False, True], ids=["mxfp8", "nvfp4"])
def test_the_manifest_describes_the_seeds_tensors(tmp_path, fp4):
    """describe_tensors (the checks every call runs before allocating) accepts the seed's
    layouts and derives the problem's scalars; the device check, which comes last, is all
    that stops these CPU tensors."""
    from dglu import validation

    variant = _variant(tmp_path, {**KEY, **(NVFP4 if fp4 else {})})
    with pytest.raises((ValueError, TypeError)) as error:
        validation.describe_tensors(variant, _tensors(fp4=fp4))
    assert "CUDA" in str(error.value)
    checks = validation._check_devices
    validation._check_devices = lambda args: None
    try:
        problem = validation.describe_tensors(variant, _tensors(fp4=fp4))
    finally:
        validation._check_devices = checks
    expected = {"m": 1024, "n": 512, "l": 8, "k_values": 1024, "k": 512 if fp4 else 1024, "k_atoms": 16 if fp4 else 8}
    assert {name: problem.scalars[name] for name in expected} == expected


@pytest.mark.parametrize(
    ("tensors", "fp4", "message"),
    [
        (_tensors(m=1000), False, "M = 1000"),
        (_tensors(n=48), False, "N = 48"),
        (_tensors(experts=16), False, "L = 16"),
        (_tensors(sf_dtype=torch.float8_e4m3fn), False, "sfa_tensor"),
        (_tensors(fp4=True, sf_dtype=torch.float8_e8m0fnu), True, "sfa_tensor"),
        (_tensors(fp4=True, a_dtype=torch.float8_e4m3fn), True, "a_tensor"),
        (_tensors(k=1000), False, "K = 1000"),
    ],
)
def test_the_runtime_refuses_what_cudnn_fe_refuses_from_the_manifest(tmp_path, tensors, fp4, message):
    from dglu.validation import describe_tensors

    with pytest.raises((ValueError, TypeError)) as error:
        describe_tensors(_variant(tmp_path, {**KEY, **(NVFP4 if fp4 else {})}), tensors)
    assert message in str(error.value)
    assert "CUDA tensor" not in str(error.value)


# --- compiled (slow tier) -------------------------------------------------------------------------

COMPILED = [
    {},
    {"dbias": True, "weight_mode": "discrete", "scheduler": "dynamic", "arch": "sm_103a"},
    {**NVFP4, "dbias": True, "act_func": "dsituglu", "act_params": ACT_PARAM_DEFAULTS["dsituglu"]},
    {**NVFP4, "d_dtype": "fp32", "dbias": True, "weight_mode": "discrete", "tile_m": 128, "cluster_m": 1},
    {"act_func": "dgeglu", "act_params": ACT_PARAM_DEFAULTS["dgeglu"], "c_dtype": "e4m3", "ab_dtype": "e5m2",
     "tile_m": 128, "cluster_m": 1},
]


@pytest.mark.slow
@pytest.mark.parametrize("change", COMPILED, ids=["mxfp8", "mxfp8_discrete_dynamic_dbias_sm103a", "nvfp4_dsituglu_dbias",
                                                  "nvfp4_fp32d_discrete_128x256", "mxfp8_e5m2_in_dgeglu_fp8c_128x256"])
def test_each_kind_of_variant_agrees_with_its_cubin(change):
    from cutlass.memory import get_smem_capacity_in_bytes

    from dglu_build.abi_check import check_variant_cubin
    from dglu_build.kernels import compile_variant

    key = {**KEY, **change}
    compiled = compile_variant(key, "dglu_t")
    entry = {**compiled.entry, "key": key}
    info = check_variant_cubin(compiled.cubin, entry, "test")  # symbols, block, every param's size and offset
    assert (info.abi_version, f"sm_{info.sm}a") == (8, key["arch"])
    for kernel in entry["kernels"]:
        found = info.kernels[kernel["symbol"]]
        assert found.frame_bytes == FAMILY.local_frame_bytes(key, kernel["role"])
        assert found.static_smem_bytes + kernel["dynamic_smem_bytes"] <= get_smem_capacity_in_bytes("sm_100")


def _ptxas() -> str | None:
    """A ptxas of CUDA 13 (PATH, or a CUDA 13 install), to read its spill report."""
    for candidate in (shutil.which("ptxas"), "/usr/local/cuda-13.0/bin/ptxas"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.mark.slow
def test_the_mxfp8_frame_is_a_declared_local_array_not_a_spill(tmp_path):
    """The PTX of an MXFP8 kernel declares one 32-byte local array (the SFD quantizer's) and
    no other local memory; the cubin's 48-byte frame is that array's. Where a CUDA 13 ptxas
    is installed, it assembles the same PTX and reports no spill stores or loads."""
    import cutlass.cute as cute

    from dglu_build.cubin_info import read_cubin
    from dglu_build.kernels.sm100_blockscaled import compile as blockscaled

    config = Config.from_key({**KEY, "dbias": True})
    kernel = blockscaled.kernel_object(config)
    blockscaled.name_kernels(kernel, "dglu_t")
    compiled = cute.compile(kernel, **blockscaled.fake_arguments(config),
                            options=f"--gpu-arch sm_100a --keep-cubin --keep-ptx --dump-dir={tmp_path}")
    ptx = compiled.__ptx__ if isinstance(compiled.__ptx__, str) else compiled.__ptx__.decode()
    declared = [line.strip() for line in ptx.splitlines() if line.lstrip().startswith(".local")]
    assert declared == [".local .align 32 .b8 \t__local_depot0[32];"]
    frames = {symbol: found.frame_bytes for symbol, found in read_cubin(compiled.__cubin__).kernels.items()}
    assert frames == {"dglu_t_main_0": SFD_FRAME_BYTES}
    ptxas = _ptxas()
    if ptxas is None:
        return
    source = tmp_path / "main.ptx"
    source.write_text(ptx)
    command = [ptxas, "-arch=sm_100a", "-v", str(source), "-o", str(tmp_path / "main.cubin")]
    done = subprocess.run(command, capture_output=True, text=True)
    if "Unsupported .version" in done.stderr:  # a CUDA 13.0 ptxas reads ISA 9.0; the kernel needs no newer
        source.write_text(re.sub(r"^\.version \S+", ".version 9.0", ptx, count=1, flags=re.M))
        done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    report = done.stderr + done.stdout
    assert f"{SFD_FRAME_BYTES} bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report, report
