"""The key field ``consumer`` (issue 25): which consumers each family builds, what a
register-epilogue consumer frees and costs, and the names and declarations it gives."""

from __future__ import annotations

import pytest

from dglu.contract.keys import KEY_FIELD_DEFAULTS, variant_name
from dglu_build.kernels import check_variant
from dglu_build.kernels.sm90_bf16 import interface
from dglu_build.kernels.sm90_bf16.config import (
    REGISTER_EPILOGUE_LAUNCH_REGISTERS,
    REGISTER_EPILOGUE_LOAD_REGISTERS,
    REGISTER_EPILOGUE_MMA_REGISTERS,
    SMEM_CAPACITY,
    SMEM_RESERVED,
    THREADS_PER_CTA,
    Config,
)

BASE = {
    "arch": "sm_90a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static",
}


def key(**changes) -> dict:
    return {**KEY_FIELD_DEFAULTS, **BASE, **changes}


def test_the_default_consumer_is_the_staged_cooperative_kernel_and_names_nothing():
    assert KEY_FIELD_DEFAULTS["consumer"] == "cooperative"
    config = Config.from_key(key())
    assert (config.consumer, config.threads_per_cta, config.num_stages) == ("cooperative", THREADS_PER_CTA, 4)
    assert variant_name(key()).endswith("_128x128_1x1_static")


@pytest.mark.parametrize(("consumer", "suffix"), [("pingpong", "_pp"), ("cooperative_rf", "_crf")])
def test_register_epilogue_consumers_name_their_variants_before_det(consumer, suffix):
    assert variant_name(key(consumer=consumer)).endswith("_static" + suffix)
    assert variant_name(key(consumer=consumer, deterministic=True)).endswith(suffix + "_det")


def test_without_the_staging_buffer_the_stages_take_its_shared_memory():
    # 227 KiB - 1 KiB reserve - 32 KiB slot ring = 194 KiB: six 32 KiB stages at 128x128,
    # four 48 KiB stages at 128x256
    pingpong = Config.from_key(key(consumer="pingpong"))
    wide = Config.from_key(key(consumer="cooperative_rf", tile_n=256))
    for config, stages in ((pingpong, 6), (wide, 4)):
        assert config.staging_bytes == 0 and config.num_stages == stages
        used = SMEM_RESERVED + config.slots.bytes + config.num_stages * config.ab_bytes
        assert used <= SMEM_CAPACITY["sm_90"]


def test_the_register_epilogue_kernels_launch_384_threads_and_fit_their_register_pool():
    for consumer, tile_n in (("pingpong", 128), ("cooperative_rf", 256)):
        config = Config.from_key(key(consumer=consumer, tile_n=tile_n))
        assert config.threads_per_cta == 384 and config.tile_queue_readers == 2 * 128 + 32
        assert config.accumulators_per_thread == 128
        (main,) = [k for k in interface.kernels(config) if k.role == "main"]
        assert main.block == 384
    pool = REGISTER_EPILOGUE_LAUNCH_REGISTERS * 384
    assert REGISTER_EPILOGUE_LOAD_REGISTERS * 128 + REGISTER_EPILOGUE_MMA_REGISTERS * 256 <= pool


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"consumer": "pingpong", "tile_n": 256},
         r"consumer 'pingpong' keeps a tile's accumulators in the MMA threads' registers: tile 128x256 needs 256 "
         r"per thread, at most 128 fit: use tile_n <= 128"),
        ({"tile_n": 256}, r"tile 128x256 with C bf16 and D bf16 leaves shared memory for 1 pipeline stages"),
        ({"consumer": "stream"}, r"consumer: family sm90_bf16 does not build 'stream'"),
        ({"consumer": "pingpong", "ab_dtype": "e4m3", "d_dtype": "e4m3"},
         r"consumer: family sm90_mxfp8 does not build 'pingpong'"),
        ({"consumer": "pingpong", "arch": "sm_100a", "experts": 8},
         r"consumer: family sm100_bf16 does not build 'pingpong'"),
    ],
)
def test_consumers_a_family_does_not_build_are_refused_with_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        check_variant(key(**changes))
