"""Cubin parity with cuDNN FE: for static configurations cuDNN FE's own BF16 path builds
(``GroupedGemmDgluBf16API(...).check_support(); .compile()`` on CPU torch tensors, its
three device queries stubbed: CUDA available, compute capability 10.0/10.3, and the DSL's
HardwareInfo), dglu's compile step, given the same N, K and L, writes a byte-identical
cubin. The shipped variants differ from these in one way only: N and K are symbolic
(checked against their own cubins in test_default_build.py and launched as cuDNN FE's host
code launches them in test_sm100_launch_parity.py)."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
torch = pytest.importorskip("torch")

from dglu_build.kernels.sm100_bf16.config import Config  # noqa: E402
from dglu_build.kernels.sm100_bf16.compile import compile_cubin  # noqa: E402

pytestmark = pytest.mark.slow

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
B200_SMS = 148


class Case(NamedTuple):
    """One static configuration: the variant's key fields and the problem's N, K, L."""

    name: str
    key: dict[str, Any]
    n: int
    k: int


def _key(**fields: Any) -> dict[str, Any]:
    base = {
        "arch": "sm_100a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dswiglu",
        "act_params": {}, "dbias": False, "weight_mode": "dense", "b_major": "k", "tile_m": 256, "tile_n": 256,
        "cluster_m": 2, "cluster_n": 1, "scheduler": "static", "experts": 8,
    }
    return {**base, **fields}


SEED_GEGLU = {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0}
DSV4_GEGLU = {"geglu_alpha": 1.0, "glu_clamp_max": 10.0, "glu_clamp_min": -10.0, "linear_offset": 0.0}
CASES = [
    Case("dswiglu_dense_256x256", _key(), 2048, 4096),
    Case("dgeglu_dense_dbias_256x256", _key(act_func="dgeglu", act_params=SEED_GEGLU, dbias=True), 1536, 2048),
    Case("dgeglu_dsv4_dense_256x256_sm103a", _key(arch="sm_103a", act_func="dgeglu", act_params=DSV4_GEGLU, experts=16), 1024, 2048),
    Case("dswiglu_discrete_dbias_256x256", _key(weight_mode="discrete", dbias=True), 2048, 1024),
    Case("dswiglu_discrete_n_major_256x256", _key(weight_mode="discrete", b_major="n", experts=4), 1024, 1024),
    Case("dswiglu_dense_n_major_dynamic_256x256", _key(b_major="n", scheduler="dynamic"), 1024, 2048),
    Case("dswiglu_dense_dbias_128x128_1cta", _key(tile_m=128, tile_n=128, cluster_m=1, dbias=True), 1024, 1024),
    Case("dgeglu_discrete_128x128_fp32_cd", _key(tile_m=128, tile_n=128, cluster_m=1, act_func="dgeglu", act_params=SEED_GEGLU,
                                                 weight_mode="discrete", c_dtype="fp32", d_dtype="fp32"), 512, 1024),
]


class _StubbedHardware:
    """cutlass.utils.HardwareInfo on a device-less machine: a B200's active clusters."""

    def get_max_active_clusters(self, cluster_size: int, stream: Any = None) -> int:
        return B200_SMS // cluster_size


def _cudnn_cubin(monkeypatch: pytest.MonkeyPatch, case: Case, symbol_prefix: str) -> bytes:
    """The cubin cuDNN FE's own compile() builds for ``case`` (the caller stubs the device)."""
    import cutlass
    import cutlass.cute as cute
    import cudnn.gemm.cutedsl.grouped.dglu._bf16_api as bf16_api

    config = Config.parse(case.key)
    major, minor = {"sm_100a": (10, 0), "sm_103a": (10, 3)}[config.arch]
    monkeypatch.setattr(bf16_api, "cuda_is_available", lambda: True)
    monkeypatch.setattr(bf16_api, "get_compute_capability", lambda *args, **kwargs: (major, minor))
    monkeypatch.setattr(cutlass.utils, "HardwareInfo", _StubbedHardware)
    captured = {}
    real_compile = cute.compile

    def compile_keeping_the_cubin(*args: Any, **kwargs: Any) -> Any:
        # cuDNN FE's options plus what makes the DSL keep the cubin, for this architecture
        kwargs["options"] = f"{kwargs.get('options') or ''} --gpu-arch {config.arch} --keep-cubin"
        captured["compiled"] = real_compile(*args, **kwargs)
        return captured["compiled"]

    monkeypatch.setattr(bf16_api.cute, "compile", compile_keeping_the_cubin)
    m, n, k, experts = 4096, case.n, case.k, config.experts
    out = TORCH_DTYPES[config.d_dtype]
    samples = {
        "sample_a": torch.empty((m, k, 1), dtype=torch.bfloat16),
        "sample_c": torch.empty((m, 2 * n, 1), dtype=TORCH_DTYPES[config.c_dtype]),
        "sample_d_row": torch.empty((m, 2 * n, 1), dtype=out),
        "sample_padded_offsets": torch.empty((experts,), dtype=torch.int32),
        "sample_alpha": torch.empty((experts,), dtype=torch.float32),
        "sample_beta": torch.empty((experts,), dtype=torch.float32),
        "sample_prob": torch.empty((m, 1, 1), dtype=torch.float32),
        "sample_dprob": torch.empty((m, 1, 1), dtype=torch.float32),
    }
    if config.dbias:
        samples["sample_dbias"] = torch.empty((experts, 2 * n, 1), dtype=torch.bfloat16)
    if config.discrete_weights:
        weights = {"num_experts": experts, "b_shape": (n, k), "b_dtype": torch.bfloat16}
    elif config.b_n_major:  # cuDNN FE takes N-major dense B in its canonical (L, K, N) form
        weights = {"sample_b": torch.empty((experts, k, n), dtype=torch.bfloat16)}
    else:
        weights = {"sample_b": torch.empty((experts, n, k), dtype=torch.bfloat16).permute(1, 2, 0)}
    constants = {name: value for name, value in config.act_params.items() if name != "linear_offset"}
    api = bf16_api.GroupedGemmDgluBf16API(
        **samples, **weights, mma_tiler_mn=(config.tile_m, config.tile_n), cluster_shape_mn=(config.cluster_m, config.cluster_n),
        act_func=config.act_func, b_major="n" if config.b_n_major else "k", use_dynamic_sched=config.dynamic_schedule,
        **constants,
    )
    assert api.check_support()
    kernel = api._kernel_instance()  # cuDNN FE's kernel object: named as dglu names its own
    kernel.kernel.set_name_prefix(f"{symbol_prefix}_main", remove_cutlass_symbol=True, keep_mangled_name=False)
    kernel.helper_kernel.set_name_prefix(f"{symbol_prefix}_helper", remove_cutlass_symbol=True, keep_mangled_name=False)
    api.compile()
    cubin = captured["compiled"].__cubin__
    assert isinstance(cubin, bytes) and cubin
    return cubin


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_dglu_compiles_cudnn_fes_static_configuration_byte_for_byte(monkeypatch, case):
    prefix = f"dglu_parity_{case.name}"
    ours, _ = compile_cubin(Config.parse(case.key), prefix, static_nk=(case.n, case.k))
    theirs = _cudnn_cubin(monkeypatch, case, prefix)
    assert hashlib.sha256(ours).hexdigest() == hashlib.sha256(theirs).hexdigest()
    assert ours == theirs


def test_the_cases_cover_both_activations_dbias_discrete_and_two_tiles():
    keys = [case.key for case in CASES]
    assert {key["act_func"] for key in keys} == {"dswiglu", "dgeglu"}
    assert {key["dbias"] for key in keys} == {True, False}
    assert {key["weight_mode"] for key in keys} == {"dense", "discrete"}
    assert {(key["tile_m"], key["tile_n"]) for key in keys} >= {(256, 256), (128, 128)}
    assert {key["arch"] for key in keys} == {"sm_100a", "sm_103a"}
