"""The sm100_bf16 family without a compile: found as a plugin, its key checks, its sources
(cuDNN FE's distribution in the build key), its manifest declaration, and the runtime's
refusals of calls cuDNN FE's BF16 path refuses (M % 256, N % 32, 16-byte alignment, L, the
dtypes), made from the manifest before anything is allocated or launched."""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

import pytest

from dglu.contract.keys import ACT_PARAM_DEFAULTS, variant_name
from dglu.contract.reader import parse_manifest
from dglu.contract.writer import manifest_data
from dglu_build.kernels.declaration import manifest_kernel
from dglu_build.kernels.registry import families, family_for
from dglu_build.kernels import cudnn_fe as upstream
from dglu_build.kernels.sm100_bf16 import FAMILY, interface
from dglu_build.kernels.sm100_bf16.config import Config
from dglu_build.specs import SpecError, parse_specs

torch = pytest.importorskip("torch")

KEY = {
    "arch": "sm_100a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 256, "tile_n": 256,
    "cluster_m": 2, "cluster_n": 1, "scheduler": "static", "deterministic": False, "act_out": False, "experts": 8,
}


def test_the_registry_finds_the_family_for_both_blackwell_architectures():
    assert families()["sm100_bf16"] is FAMILY
    assert family_for({"arch": "sm_100a", "ab_dtype": "bf16"}) is FAMILY
    assert family_for({"arch": "sm_103a", "ab_dtype": "bf16"}) is FAMILY
    with pytest.raises(ValueError, match="no kernel family builds"):
        family_for({"arch": "sm_100a", "ab_dtype": "fp16"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"experts": 0}, "experts: the kernel compiles its expert count in: give 1..1024, got 0"),
        ({"experts": 1025}, "got 1025"),
        ({"cluster_m": 1}, "cluster_m: a 256-row tile spans a CTA pair"),
        ({"tile_m": 128, "tile_n": 128}, "cluster_m: a 128-row tile runs on one CTA"),
        ({"b_major": "n"}, "b_major: N-major dense B is not built for symbolic N and K"),
        ({"act_func": "dgeglu", "act_params": {**ACT_PARAM_DEFAULTS["dgeglu"], "geglu_alpha": -1.0}}, "geglu_alpha > 0"),
    ],
)
def test_check_refuses_what_dglu_does_not_build(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FAMILY.check({**KEY, **change})


def _spec(**change) -> str:
    fields = {k: v for k, v in {**KEY, **change}.items() if k not in ("act_params", "deterministic", "act_out")}
    text = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in fields.items())
    return f"variants:\n  - {{{text}}}\n"


def test_spec_files_refuse_values_the_family_does_not_allow():
    with pytest.raises(SpecError, match="field 'act_func': got 'dsituglu', allowed: 'dswiglu', 'dgeglu'"):
        parse_specs(_spec(act_func="dsituglu"))
    with pytest.raises(SpecError, match="fields \\(cluster_m, cluster_n\\): got \\(2, 2\\)"):
        parse_specs(_spec(cluster_n=2))
    (variant,) = parse_specs(_spec())
    assert variant.name == variant_name(KEY) == "sm100a_bf16_bf16_bf16_dswiglu_dbias_dense_k_256x256_2x1_static_e8"


def test_sources_name_the_pinned_distribution_and_hash_its_kernel_files():
    sources = FAMILY.sources()
    assert sources[f"{upstream.DISTRIBUTION}:version"] == upstream.VERSION == importlib.metadata.version(upstream.DISTRIBUTION)
    found = importlib.metadata.distribution(upstream.DISTRIBUTION)
    kernel = "cudnn/gemm/cutedsl/grouped/dglu/moe_grouped_gemm_dglu_dbias.py"
    expected = hashlib.sha256(found.locate_file(kernel).read_bytes()).hexdigest()
    assert sources[f"{upstream.DISTRIBUTION}:{kernel}"] == expected
    assert "sm100_bf16/compile.py" in sources and "family.py" in sources
    assert "dglu/contract/element_types.py" in sources  # the element sizes and CuTe DSL types
    assert FAMILY.sources_hash() != families()["sm90_bf16"].sources_hash()


def test_the_family_ships_cudnn_fes_apache_license_and_notice():
    notices = FAMILY.notices()
    assert set(notices) == {f"{upstream.DISTRIBUTION}/LICENSE.txt", f"{upstream.DISTRIBUTION}/NOTICE"}
    assert b"Apache License" in notices[f"{upstream.DISTRIBUTION}/LICENSE.txt"]
    assert families()["sm90_bf16"].notices() == {}


def test_the_declaration_states_cudnn_fes_checks_as_limits_and_arguments():
    entry = FAMILY.declare(KEY)
    limits = entry["limits"]
    assert limits["m"]["multiple_of"] == 256 and limits["n"]["multiple_of"] == 32 and limits["k"]["multiple_of"] == 8
    assert (limits["l"]["min"], limits["l"]["max"]) == (8, 8)
    assert all(rule["align"] == 16 for name, rule in entry["arguments"].items())
    assert entry["arguments"]["a"]["dtypes"] == ["bf16"] and entry["arguments"]["dbias"]["dtypes"] == ["bf16"]
    assert entry["workspaces"] == {"workspace": {"dtype": "i64", "count": 16, "align": 128, "zero": "never"}}
    discrete = FAMILY.declare({**KEY, "weight_mode": "discrete", "scheduler": "dynamic", "experts": 16})
    assert discrete["workspaces"]["workspace"]["count"] * 8 == 128 * 16 + 128  # 16 descriptors, the counter, aligned
    assert discrete["arguments"]["b_ptrs"]["align"] == 8


def _variant(tmp_path: Path, key: dict):
    """The variant as the runtime reads it: the family's declaration, kernels of stand-in symbols."""
    config = Config.from_key(key)
    kernels = [manifest_kernel(kernel, f"k_{kernel.role}", 1024, lambda tensor: []) for kernel in interface.kernels(config)]
    entry = {
        "name": variant_name(key), "family": "sm100_bf16", "key": key, "cubin": "x.cubin", "sha256": "0" * 64,
        "size": 1, "build": {"dglu_version": "0", "source_hash": "0" * 64, "toolchain": {}}, "min_driver": 13040,
        **FAMILY.declare(key), "kernels": kernels,
    }
    (variant,) = parse_manifest(manifest_data([entry]), tmp_path / "manifest.json").variants
    return variant


def _tensors(m=1024, n=512, k=1024, experts=8, a_dtype=torch.bfloat16, offset=0):
    a = torch.zeros(m * k + offset, dtype=a_dtype)[offset:].view(m, k, 1)
    return {
        "a": ("a_tensor", a),
        "b": ("b_tensor", torch.zeros((experts, n, k), dtype=torch.bfloat16).permute(1, 2, 0)),
        "c": ("c_tensor", torch.zeros((m, 2 * n, 1), dtype=torch.bfloat16)),
        "d_row": ("d_row_tensor", torch.zeros((m, 2 * n, 1), dtype=torch.bfloat16)),
        "padded_offsets": ("padded_offsets", torch.zeros((experts,), dtype=torch.int32)),
        "alpha": ("alpha_tensor", torch.zeros((experts,), dtype=torch.float32)),
        "beta": ("beta_tensor", torch.zeros((experts,), dtype=torch.float32)),
        "prob": ("prob_tensor", torch.zeros((m, 1, 1), dtype=torch.float32)),
        "dprob": ("dprob_tensor", torch.zeros((m, 1, 1), dtype=torch.float32)),
        "dbias": ("dbias_tensor", torch.zeros((experts, 2 * n, 1), dtype=torch.bfloat16)),
    }


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        (_tensors(m=1000), "M = 1000"),
        (_tensors(n=48), "N = 48"),
        (_tensors(k=1020), "K = 1020"),
        (_tensors(experts=16), "L = 16"),
        (_tensors(a_dtype=torch.float16), "a_tensor"),
        (_tensors(offset=1), "a_tensor"),
    ],
)
def test_the_runtime_refuses_what_cudnn_fe_refuses_from_the_manifest(tmp_path, tensors, message):
    """describe_tensors (the checks every call runs before allocating) on CPU tensors: each
    refusal names the argument or scalar; the device check, which comes last, is never reached."""
    from dglu.validation import describe_tensors

    with pytest.raises((ValueError, TypeError)) as error:
        describe_tensors(_variant(tmp_path, KEY), tensors)
    assert message in str(error.value)
    assert "CUDA tensor" not in str(error.value)
