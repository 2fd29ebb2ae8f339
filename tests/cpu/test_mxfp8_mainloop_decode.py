"""The sm90 MXFP8 family's mainloop-decode build choice (DGLU_SM90_MXFP8_DECODE=mainloop), as
declared (no CuTe DSL): FP8 A and B go to the fused kernel by TMA with their scale factors,
no decoded operand has a workspace, and the shared memory holds the FP8 stages beside the
decoded buffers."""

from __future__ import annotations

import pytest

from dglu.contract.expressions import parse_expr
from dglu_build.kernels.declaration import Pointer, TmaTensor
from dglu_build.kernels.sm90_mxfp8 import FAMILY, interface
from dglu_build.kernels.sm90_mxfp8.config import DECODE_CHOICE_VARIABLE, Config

KEY = {
    "arch": "sm_90a", "ab_dtype": "e4m3", "c_dtype": "bf16", "d_dtype": "e4m3", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static", "deterministic": False, "act_out": False,
}
WEIGHTS = [("dense", "k"), ("dense", "n"), ("discrete", "k"), ("discrete", "n")]


def _config(monkeypatch, **fields) -> Config:
    monkeypatch.setenv(DECODE_CHOICE_VARIABLE, "mainloop")
    return Config.from_key({**KEY, **fields})


def _bytes(config: Config, m: int, n: int, k: int, l: int) -> int:
    scalars = {"m": m, "n": n, "k": k, "l": l}
    for name, text in interface.SCALARS.items():
        scalars[name] = parse_expr(text).value(scalars)
    sizes = {"bf16": 2, "fp32": 4, "i32": 4, "i64": 8}
    return sum(parse_expr(w["count"]).value(scalars) * sizes[w["dtype"]] for w in interface.workspaces(config).values())


def test_the_default_build_decodes_into_workspaces(monkeypatch) -> None:
    monkeypatch.delenv(DECODE_CHOICE_VARIABLE, raising=False)
    config = Config.from_key(KEY)
    assert not config.mainloop_decode
    assert {"a_bf16", "b_bf16"} <= set(interface.workspaces(config))


def test_an_unknown_choice_is_refused_by_name(monkeypatch) -> None:
    monkeypatch.setenv(DECODE_CHOICE_VARIABLE, "registers")
    with pytest.raises(ValueError, match=f"^{DECODE_CHOICE_VARIABLE}: got 'registers'"):
        Config.from_key(KEY)


def test_the_choice_enters_the_build_key(monkeypatch) -> None:
    monkeypatch.setenv(DECODE_CHOICE_VARIABLE, "workspaces")
    workspaces = FAMILY.sources_hash()
    monkeypatch.setenv(DECODE_CHOICE_VARIABLE, "mainloop")
    assert FAMILY.sources_hash() != workspaces


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_the_fused_kernel_reads_fp8_operands_and_their_scales(monkeypatch, weight_mode: str, b_major: str) -> None:
    config = _config(monkeypatch, weight_mode=weight_mode, b_major=b_major)
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
def test_no_workspace_grows_with_the_operands(monkeypatch, weight_mode: str, b_major: str) -> None:
    config = _config(monkeypatch, weight_mode=weight_mode, b_major=b_major)
    assert not {"a_bf16", "b_bf16"} & set(interface.workspaces(config))
    # doubling K leaves the workspaces as they are (no M*K or N*K term)
    assert _bytes(config, 4096, 1024, 2048, 8) == _bytes(config, 4096, 1024, 4096, 8)


def test_shared_memory_holds_two_fp8_stages_beside_the_decoded_buffers(monkeypatch) -> None:
    geometry = _config(monkeypatch).geometry
    assert geometry.stages == 2
    assert geometry.stage_bytes == (128 + 128) * 64
    assert _config(monkeypatch, tile_n=64).geometry.stages > 2


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_the_one_pass_kernel_quantizes_in_its_epilogue(monkeypatch, weight_mode: str, b_major: str) -> None:
    monkeypatch.setenv(DECODE_CHOICE_VARIABLE, "one-pass")
    config = Config.from_key({**KEY, "weight_mode": weight_mode, "b_major": b_major})
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
@pytest.mark.parametrize("choice", ["mainloop", "one-pass"])
@pytest.mark.parametrize(("weight_mode", "b_major"), [("dense", "k"), ("discrete", "n")])
def test_each_choice_compiles_within_shared_memory_and_registers(
    monkeypatch, choice: str, weight_mode: str, b_major: str
) -> None:
    """The fused kernel of each build choice compiles (no GPU), launches the declared kernels,
    fits sm_90's shared memory, and keeps its stack to the staging addresses the MMA
    warpgroups spill (11-14 words; the loops themselves use no local memory: SASS, RESULTS)."""
    pytest.importorskip("cutlass", reason="compiling needs CuTe DSL")
    from dglu_build.cubin_info import read_cubin
    from dglu_build.kernels.sm90_bf16.config import SMEM_ARCH, SMEM_CAPACITY

    monkeypatch.setenv(DECODE_CHOICE_VARIABLE, choice)
    key = {**KEY, "weight_mode": weight_mode, "b_major": b_major}
    cubin, fields = FAMILY.compile(key, "dglu_test")
    roles = [kernel["role"] for kernel in fields["kernels"]]
    assert roles == [kernel.role for kernel in interface.kernels(Config.from_key(key))]
    (main,) = [kernel for kernel in fields["kernels"] if kernel["role"] == "main"]
    assert main["dynamic_smem_bytes"] <= SMEM_CAPACITY[SMEM_ARCH] - 1024
    frame = read_cubin(cubin).kernels[main["symbol"]].frame_bytes
    assert frame <= 64
