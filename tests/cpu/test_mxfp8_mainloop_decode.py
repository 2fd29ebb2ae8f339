"""The sm90 MXFP8 family's key field ``decode`` (mainloop, one_pass; prepass the default), as
declared (no CuTe DSL): FP8 A and B go to the fused kernel by TMA with their scale factors,
no decoded operand has a workspace, and the shared memory holds the FP8 stages beside the
decoded buffers."""

from __future__ import annotations

import pytest

from dglu.contract.expressions import parse_expr
from dglu_build.kernels.declaration import Pointer, TmaTensor
from dglu_build.kernels.sm90_mxfp8 import FAMILY, interface
from dglu.contract.keys import KEY_FIELD_DEFAULTS, variant_name
from dglu_build.kernels.sm90_mxfp8.config import Config

KEY = {
    "arch": "sm_90a", "ab_dtype": "e4m3", "c_dtype": "bf16", "d_dtype": "e4m3", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static", "deterministic": False, "act_out": False,
}
WEIGHTS = [("dense", "k"), ("dense", "n"), ("discrete", "k"), ("discrete", "n")]


def _config(**fields) -> Config:
    return Config.from_key({**KEY, "decode": "mainloop", **fields})


def _bytes(config: Config, m: int, n: int, k: int, l: int) -> int:
    scalars = {"m": m, "n": n, "k": k, "l": l}
    for name, text in interface.SCALARS.items():
        scalars[name] = parse_expr(text).value(scalars)
    sizes = {"bf16": 2, "fp32": 4, "i32": 4, "i64": 8}
    return sum(parse_expr(w["count"]).value(scalars) * sizes[w["dtype"]] for w in interface.workspaces(config).values())


def test_the_default_decode_writes_decoded_workspaces() -> None:
    for key in (KEY, {**KEY, "decode": "prepass"}):
        config = Config.from_key(key)
        assert not config.mainloop_decode and not config.epilogue_quantize
        assert {"a_bf16", "b_bf16"} <= set(interface.workspaces(config))


def test_an_unknown_decode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="^decode: got 'registers'"):
        Config.from_key({**KEY, "decode": "registers"})
    with pytest.raises(ValueError, match="^decode: family sm90_mxfp8 does not build 'registers'"):
        FAMILY.check_allowed({**KEY_FIELD_DEFAULTS, **KEY, "decode": "registers"})


def test_the_decode_names_the_variant() -> None:
    names = {decode: variant_name({**KEY, "decode": decode}) for decode in ("prepass", "mainloop", "one_pass")}
    assert names["prepass"] == variant_name(KEY) and not names["prepass"].endswith(("_mld", "_1p"))
    assert names["mainloop"] == names["prepass"] + "_mld" and names["one_pass"] == names["prepass"] + "_1p"


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_the_fused_kernel_reads_fp8_operands_and_their_scales(weight_mode: str, b_major: str) -> None:
    config = _config(weight_mode=weight_mode, b_major=b_major)
    kernels = {kernel.role: kernel for kernel in interface.kernels(config)}
    discrete = weight_mode == "discrete"
    assert list(kernels) == [
        "effective_offsets", *(["b_descriptors"] if discrete else []), "main", "dbias_finish", "quantize_d"
    ]
    params = kernels["main"].params
    b = "b_expert" if discrete else "b"
    assert [p.tensor for p in params if isinstance(p, TmaTensor)] == ["a", b, "c", "d_acc"]
    pointers = [p.tensor for p in params if isinstance(p, Pointer)]
    assert pointers[-2:] == ["sfa", "sfb_ptrs" if discrete else "sfb"]
    rules = interface.tma_rules(config)
    assert rules["a"]["dtype"] == rules[b]["dtype"] == "e4m3"
    assert rules["a"]["swizzle"] == rules[b]["swizzle"] == "none"
    # one k-tile of 64 bytes of K, or 128 bytes of N-major B's N
    inner = 128 if b_major == "n" else 64
    assert rules[b]["box"][0] == inner
    if discrete:
        assert interface.views(config)["b_expert"]["of"] == "b_ptrs"


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_no_workspace_grows_with_the_operands(weight_mode: str, b_major: str) -> None:
    config = _config(weight_mode=weight_mode, b_major=b_major)
    assert not {"a_bf16", "b_bf16"} & set(interface.workspaces(config))
    # doubling K leaves the workspaces as they are (no M*K or N*K term)
    assert _bytes(config, 4096, 1024, 2048, 8) == _bytes(config, 4096, 1024, 4096, 8)


def test_shared_memory_holds_two_fp8_stages_beside_the_decoded_buffers() -> None:
    geometry = _config().geometry
    assert geometry.stages == 2
    assert geometry.stage_bytes == (128 + 128) * 64
    assert _config(tile_n=64).geometry.stages > 2


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_the_one_pass_kernel_quantizes_in_its_epilogue(weight_mode: str, b_major: str) -> None:
    config = Config.from_key({**KEY, "decode": "one_pass", "weight_mode": weight_mode, "b_major": b_major})
    assert config.mainloop_decode and config.epilogue_quantize
    kernels = {kernel.role: kernel for kernel in interface.kernels(config)}
    assert "quantize_d" not in kernels and "dequant_a" not in kernels
    params = kernels["main"].params
    assert "d_acc" not in [p.tensor for p in params if isinstance(p, TmaTensor)]
    pointers = [p.tensor for p in params if isinstance(p, Pointer)]
    assert pointers[-5:] == ["d_row", "d_col", "sfd_row", "sfd_col", "norm_const"]
    assert [p.scalar for p in params if not isinstance(p, (TmaTensor, Pointer))] == ["n", "l", "discrete_col_sfd"]
    assert "d_acc" not in interface.tma_rules(config) and "d_acc" not in interface.views(config)
    # no workspace grows with M, N or K: what is left is O(L) (dbias sums, offsets, descriptors)
    workspaces = _bytes(config, 4096, 1024, 2048, 8)
    assert workspaces == _bytes(config, 8192, 1024, 4096, 8)
    assert set(interface.workspaces(config)) <= {"dbias_ws", "offsets_ws", "b_desc_ws", "tile_counter"}


@pytest.mark.slow
@pytest.mark.parametrize("decode", ["mainloop", "one_pass"])
@pytest.mark.parametrize(("weight_mode", "b_major"), [("dense", "k"), ("discrete", "n")])
def test_each_decode_compiles_within_shared_memory_and_registers(decode: str, weight_mode: str, b_major: str) -> None:
    """The fused kernel of each decode compiles (no GPU), launches the declared kernels,
    fits sm_90's shared memory, and keeps its stack to the staging addresses the MMA
    warpgroups spill before the k-loop and reload once a tile (22 words since the integer
    decode; the k-loop and the epilogue's loops use no local memory: SASS, RESULTS)."""
    pytest.importorskip("cutlass", reason="compiling needs CuTe DSL")
    from dglu_build.cubin_info import read_cubin
    from dglu_build.kernels.sm90_bf16.config import SMEM_ARCH, SMEM_CAPACITY

    key = {**KEY, "decode": decode, "weight_mode": weight_mode, "b_major": b_major}
    cubin, fields = FAMILY.compile(key, "dglu_test")
    roles = [kernel["role"] for kernel in fields["kernels"]]
    assert roles == [kernel.role for kernel in interface.kernels(Config.from_key(key))]
    (main,) = [kernel for kernel in fields["kernels"] if kernel["role"] == "main"]
    assert main["dynamic_smem_bytes"] <= SMEM_CAPACITY[SMEM_ARCH] - 1024
    frame = read_cubin(cubin).kernels[main["symbol"]].frame_bytes
    assert frame <= 96


def test_the_register_epilogue_consumer_takes_a_128x256_tile_and_names_the_variant() -> None:
    config = _config(consumer="cooperative_rf", tile_n=256)
    assert config.main.register_epilogue and config.main.staging_bytes == 0
    assert config.geometry.stage_bytes == (128 + 256) * 64 and config.geometry.stages >= 2
    (main,) = [kernel for kernel in interface.kernels(config) if kernel.role == "main"]
    assert main.block == config.main.threads_per_cta  # the register-epilogue kernel's 384 threads
    name = variant_name({**KEY, "decode": "mainloop", "consumer": "cooperative_rf", "tile_n": 256})
    assert name.endswith("_128x256_1x1_static_crf_mld")
    FAMILY.check_allowed({**KEY_FIELD_DEFAULTS, **KEY, "decode": "mainloop", "consumer": "cooperative_rf"})


def test_the_register_epilogue_consumer_refuses_what_it_cannot_build() -> None:
    for decode in ("prepass", "one_pass"):
        with pytest.raises(ValueError, match=f"runs the mainloop decode only .*got decode '{decode}'"):
            Config.from_key({**KEY, "decode": decode, "consumer": "cooperative_rf"})
    with pytest.raises(ValueError, match="N-major B takes tile_n <= 128"):
        _config(consumer="cooperative_rf", tile_n=256, b_major="n")
    with pytest.raises(ValueError, match="consumer: family sm90_mxfp8 does not build 'pingpong'"):
        FAMILY.check_allowed({**KEY_FIELD_DEFAULTS, **KEY, "consumer": "pingpong"})


@pytest.mark.slow
def test_the_register_epilogue_decode_compiles_without_local_memory() -> None:
    """The 128x256 cooperative_rf kernel with the mainloop decode compiles (no GPU), fits
    sm_90's shared memory and keeps no stack frame (its MMA warpgroups' 232 registers hold
    the 64x256 accumulators and the decode)."""
    pytest.importorskip("cutlass", reason="compiling needs CuTe DSL")
    from dglu_build.cubin_info import read_cubin
    from dglu_build.kernels.sm90_bf16.config import SMEM_ARCH, SMEM_CAPACITY

    key = {**KEY, "decode": "mainloop", "consumer": "cooperative_rf", "tile_n": 256}
    cubin, fields = FAMILY.compile(key, "dglu_test")
    (main,) = [kernel for kernel in fields["kernels"] if kernel["role"] == "main"]
    assert main["block"] == [384, 1, 1]
    assert main["dynamic_smem_bytes"] <= SMEM_CAPACITY[SMEM_ARCH] - 1024
    assert read_cubin(cubin).kernels[main["symbol"]].frame_bytes == 0
