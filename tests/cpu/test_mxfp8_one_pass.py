"""The sm90 MXFP8 family's one-pass kernel, as declared (no CuTe DSL): FP8 A and B go to the
fused kernel by TMA with their scale factors, it quantizes D in its epilogue, no workspace
grows with M or K (dbias's sums are L x 2N; FP8 C is read in the slot ring), and its shared
memory holds the FP8 stages beside the decoded buffers."""

from __future__ import annotations

import pytest

from dglu.contract.expressions import parse_expr
from dglu.contract.keys import KEY_FIELD_DEFAULTS
from dglu_build.kernels.declaration import Pointer, TmaTensor
from dglu_build.kernels.sm90_mxfp8 import FAMILY, interface
from dglu_build.kernels.sm90_mxfp8.config import Config

KEY = {
    "arch": "sm_90a", "ab_dtype": "e4m3", "c_dtype": "bf16", "d_dtype": "e4m3", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static", "deterministic": False, "act_out": False,
}
WEIGHTS = [("dense", "k"), ("dense", "n"), ("discrete", "k"), ("discrete", "n")]
O_L_WORKSPACES = {"dbias_ws", "offsets_ws", "b_desc_ws", "tile_counter"}


def _config(**fields) -> Config:
    return Config.from_key({**KEY, **fields})


def _bytes(config: Config, m: int, n: int, k: int, l: int) -> int:
    scalars = {"m": m, "n": n, "k": k, "l": l}
    for name, text in interface.SCALARS.items():
        scalars[name] = parse_expr(text).value(scalars)
    sizes = {"bf16": 2, "fp32": 4, "i32": 4, "i64": 8}
    return sum(parse_expr(w["count"]).value(scalars) * sizes[w["dtype"]] for w in interface.workspaces(config).values())


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_the_fused_kernel_reads_fp8_operands_and_their_scales(weight_mode: str, b_major: str) -> None:
    config = _config(weight_mode=weight_mode, b_major=b_major)
    kernels = {kernel.role: kernel for kernel in interface.kernels(config)}
    discrete = weight_mode == "discrete"
    assert list(kernels) == ["effective_offsets", *(["b_descriptors"] if discrete else []), "main", "dbias_finish"]
    params = kernels["main"].params
    b = "b_expert" if discrete else "b"
    assert [p.tensor for p in params if isinstance(p, TmaTensor)] == ["a", b, "c"]
    rules = interface.tma_rules(config)
    assert set(rules) == {"a", b, "c"}
    assert rules["a"]["dtype"] == rules[b]["dtype"] == "e4m3"
    assert rules["a"]["swizzle"] == rules[b]["swizzle"] == "none"
    # one k-tile of 64 bytes of K, or 128 bytes of N-major B's N
    inner = 128 if b_major == "n" else 64
    assert rules[b]["box"][0] == inner
    if discrete:
        assert interface.views(config)["b_expert"]["of"] == "b_ptrs"


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_the_fused_kernel_quantizes_d_in_its_epilogue(weight_mode: str, b_major: str) -> None:
    config = _config(weight_mode=weight_mode, b_major=b_major)
    (main,) = [kernel for kernel in interface.kernels(config) if kernel.role == "main"]
    pointers = [p.tensor for p in main.params if isinstance(p, Pointer)]
    sfb = "sfb_ptrs" if weight_mode == "discrete" else "sfb"
    assert pointers[-7:] == ["sfa", sfb, "d_row", "d_col", "sfd_row", "sfd_col", "norm_const"]
    assert [p.scalar for p in main.params if not isinstance(p, (TmaTensor, Pointer))] == ["n", "l", "discrete_col_sfd"]


@pytest.mark.parametrize(("weight_mode", "b_major"), WEIGHTS)
def test_no_workspace_grows_with_the_problem(weight_mode: str, b_major: str) -> None:
    config = _config(weight_mode=weight_mode, b_major=b_major)
    assert set(interface.workspaces(config)) <= O_L_WORKSPACES
    # doubling M or K leaves the workspaces as they are (dbias's sums per expert and column
    # of D, the offsets, the descriptors, the tile counter)
    base = _bytes(config, 4096, 1024, 2048, 8)
    assert base == _bytes(config, 8192, 1024, 4096, 8)
    assert _bytes(config, 4096, 2048, 2048, 8) - base == 8 * 2 * 1024 * 4  # dbias_ws: L x 2N fp32


@pytest.mark.parametrize("c_dtype", ["e4m3", "e5m2"])
def test_fp8_c_goes_to_the_fused_kernel_by_tma_with_no_workspace(c_dtype: str) -> None:
    config = _config(c_dtype=c_dtype)
    assert [kernel.role for kernel in interface.kernels(config)] == ["effective_offsets", "main", "dbias_finish"]
    assert set(interface.workspaces(config)) <= O_L_WORKSPACES
    assert interface.views(config) == {}
    rule = interface.tma_rules(config)["c"]
    # one unswizzled box of an epilogue warp's 16 rows by the group's 64 one-byte columns
    assert (rule["dtype"], rule["swizzle"], rule["box"]) == (c_dtype, "none", [64, 16])


def _d_rows_overwriting_fp8_c(config: Config) -> dict[tuple[int, int], set[int]]:
    """(slot, D row) -> the rows of FP8 C whose bytes that row's fp32 D overwrites, from the
    ring's D boxes (the BF16 kernel's: 128-byte rows, one box per 32 columns) and Fp8CBoxes."""
    slots, placed = config.main.slots, config.fp8_c_boxes
    d_row_bytes = slots.d.box_cols * 4
    c_bytes = {}  # byte of the ring -> (slot, C row)
    for slot in range(2):
        for row in range(config.tile_m):
            start = placed.offset(slot, row // placed.rows) + row % placed.rows * 64
            c_bytes.update({byte: (slot, row) for byte in range(start, start + 64)})
    overwritten = {}
    for slot in range(2):
        for row in range(config.tile_m):
            rows = overwritten.setdefault((slot, row), set())
            for box in range(slots.d.boxes):
                start = slot * placed.slot_bytes + (box * config.tile_m + row) * d_row_bytes
                hits = {c_bytes[byte] for byte in range(start, start + d_row_bytes) if byte in c_bytes}
                assert {hit_slot for hit_slot, _ in hits} <= {slot}
                rows.update(c_row for _, c_row in hits)
    assert len(c_bytes) == 2 * config.tile_m * 64  # the C boxes do not overlap
    return overwritten


def test_fp8_c_is_overwritten_only_where_its_warp_has_read_it() -> None:
    """The epilogue warp that owns D row r (of ``rows`` consecutive ones) reads C row by row and
    writes each row's D after reading that row's C: its D may only overwrite C of its own
    rows, at or before r."""
    config = _config(c_dtype="e4m3")
    rows = config.fp8_c_boxes.rows
    overwritten = _d_rows_overwriting_fp8_c(config)
    assert any(overwritten.values())  # the check below is not vacuous
    for (_, row), c_rows in overwritten.items():
        assert all(c // rows == row // rows and c <= row for c in c_rows), (row, sorted(c_rows))


def test_shared_memory_holds_two_fp8_stages_beside_the_decoded_buffers() -> None:
    geometry = _config().geometry
    assert geometry.stages == 2
    assert geometry.stage_bytes == (128 + 128) * 64
    assert _config(tile_n=64).geometry.stages > 2


def test_what_the_family_cannot_build_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="consumer: family sm90_mxfp8 does not build 'pingpong'"):
        FAMILY.check_allowed({**KEY_FIELD_DEFAULTS, **KEY, "consumer": "pingpong"})
    with pytest.raises(ValueError, match="consumer: family sm90_mxfp8 does not build 'cooperative_rf'"):
        FAMILY.check_allowed({**KEY_FIELD_DEFAULTS, **KEY, "consumer": "cooperative_rf"})
    with pytest.raises(ValueError, match="tile 128x256 .* leaves shared memory"):
        _config(tile_n=256)


@pytest.mark.slow
@pytest.mark.parametrize(("weight_mode", "b_major"), [("dense", "k"), ("discrete", "n")])
def test_the_kernels_compile_within_shared_memory_and_registers(weight_mode: str, b_major: str) -> None:
    """The variant compiles (no GPU), launches the declared kernels, fits sm_90's shared
    memory, and keeps its stack to the staging addresses the MMA warpgroups spill before
    the k-loop and reload once a tile (the k-loop and the epilogue's loops use no local
    memory: SASS, bench/RESULTS.md)."""
    pytest.importorskip("cutlass", reason="compiling needs CuTe DSL")
    from dglu_build.cubin_info import read_cubin
    from dglu_build.kernels.sm90_bf16.config import SMEM_ARCH, SMEM_CAPACITY

    key = {**KEY, "weight_mode": weight_mode, "b_major": b_major}
    cubin, fields = FAMILY.compile(key, "dglu_test")
    roles = [kernel["role"] for kernel in fields["kernels"]]
    assert roles == [kernel.role for kernel in interface.kernels(Config.from_key(key))]
    (main,) = [kernel for kernel in fields["kernels"] if kernel["role"] == "main"]
    assert main["dynamic_smem_bytes"] <= SMEM_CAPACITY[SMEM_ARCH] - 1024
    frame = read_cubin(cubin).kernels[main["symbol"]].frame_bytes
    assert frame <= 96
