"""round_dgrad_to_input_dtype (cuDNN FE 1.32.0's option) on the CPU: a runtime flag of the
BF16 family's main kernel (declared once, in the manifest's ``flags``), absent from the
block-scaled composition. The rounding itself: test_golden_values.py (the reference),
test_runtime_gpu_reference.py (the GPU checks tell rounded from unrounded R), and (slow)
test_runtime_real_artifacts.py (the compiled kernels' parameter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dglu_build.kernels.declaration import Int32, Pointer, check_signature
from dglu_build.kernels.sm90_bf16 import interface
from dglu_build.kernels.sm90_bf16.config import Config
from dglu_build.kernels.sm90_mxfp8 import interface as mx_interface
from dglu_build.kernels.sm90_mxfp8.config import Config as MxConfig

from test_deterministic_mode import BASE

FLAG = "round_dgrad_to_input_dtype"
BF16_KEYS = {
    "dense": BASE,
    "act_out": {**BASE, "act_out": True},
    "deterministic": {**BASE, "deterministic": True},
    "discrete": {**BASE, "weight_mode": "discrete", "b_major": "n", "dbias": False},
}


@pytest.mark.parametrize("key", list(BF16_KEYS.values()), ids=list(BF16_KEYS))
def test_every_bf16_variant_declares_the_flag_as_the_main_kernels_int32_after_l(key) -> None:
    config = Config.from_key(key)
    assert interface.entry(config)["flags"] == [FLAG]
    params = interface.main_kernel(config).params
    after_l = params[params.index(Int32("l")) + 1:]
    assert after_l == ((Int32(FLAG), Pointer("act_out")) if config.act_out else (Int32(FLAG),))


def test_signature_check_reads_an_optional_int32_before_the_act_out_pointer() -> None:
    """The DSL casts a plain Int32 parameter's None, so the kernel annotates the flag
    ``Int32 | None``; a kernel without the flag (the block-scaled composition's) leaves
    both trailing parameters out."""

    def kernel(l: Int32, round_dgrad: Int32 | None = None, act_out: Pointer = None):  # the DSL's type names
        pass

    for declared in ((Int32("l"),), (Int32("l"), Int32(FLAG)), (Int32("l"), Int32(FLAG), Pointer("act_out"))):
        check_signature(kernel, declared)
    with pytest.raises(TypeError):
        check_signature(kernel, (Int32("l"), Pointer("act_out")))


def test_the_block_scaled_composition_has_no_such_flag() -> None:
    config = MxConfig.from_key({**BASE, "ab_dtype": "e4m3", "d_dtype": "e4m3", "act_func": "dgeglu"})
    assert config.main.block_scaled_contract and not interface.takes_dgrad_rounding(config.main)
    assert FLAG not in mx_interface.entry(config)["flags"]
    main = next(k for k in mx_interface.kernels(config) if k.role == "main")
    assert main.params[-1] == Int32("l")
