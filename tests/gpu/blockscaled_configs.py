"""The MXFP8 variant matrix the GPU suite covers: what kernel_specs/default.yaml ships for
the sm90_mxfp8 family (E4M3 A/B and D, BF16 C; the 3 activations x dbias on/off x dense or
discrete B, K- or N-major, x static or dynamic scheduler; plus four dSwiGLU extras).

An MxConfig is one shipped configuration as a caller reaches it. SHIPPED lists them;
test_blockscaled_gpu.py checks it against the installed manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import torch

from configs import ACTIVATIONS

FAMILY = "sm90_mxfp8"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BF16, FP32 = torch.bfloat16, torch.float32
DTYPE_NAMES = {BF16: "bf16", torch.float16: "fp16", FP32: "fp32", E4M3: "e4m3", E5M2: "e5m2"}
TILE, CLUSTER = (128, 128), (1, 1)
WEIGHTS = (("dense", "k"), ("dense", "n"), ("discrete", "k"), ("discrete", "n"))


@dataclass(frozen=True)
class MxConfig:
    """One shipped MXFP8 variant, as the arguments of a call select it."""

    activation: str  # a key of configs.ACTIVATIONS
    ab_dtype: torch.dtype = E4M3
    c_dtype: torch.dtype = BF16
    d_dtype: torch.dtype = E4M3
    dbias: bool = True
    weight_mode: str = "dense"  # or "discrete": per-expert matrices behind b_ptrs, SFB behind sfb_ptrs
    b_major: str = "k"
    scheduler: str = "static"

    @property
    def discrete(self) -> bool:
        return self.weight_mode == "discrete"

    @property
    def act_func(self) -> str:
        return ACTIVATIONS[self.activation][0]

    @property
    def act_params(self) -> dict[str, float]:
        return dict(ACTIVATIONS[self.activation][1])

    def act_kwargs(self) -> dict[str, object]:
        return {"act_func": self.act_func, **self.act_params}

    def launch_kwargs(self) -> dict[str, object]:
        """The scheduler and b_major arguments (b_major names dense B's order too)."""
        return {"use_dynamic_sched": self.scheduler == "dynamic", "b_major": self.b_major}

    def __str__(self) -> str:
        names = [DTYPE_NAMES[t] for t in (self.ab_dtype, self.c_dtype, self.d_dtype)]
        dbias = "dbias" if self.dbias else "nodbias"
        return f"{self.activation}-{'-'.join(names)}-{dbias}-{self.weight_mode}-{self.b_major}-{self.scheduler}"


SHIPPED: list[MxConfig] = [
    *(
        MxConfig(activation, dbias=dbias, weight_mode=mode, b_major=major, scheduler=scheduler)
        for activation, dbias, (mode, major), scheduler in product(
            ("dswiglu", "dgeglu", "dsituglu"), (True, False), WEIGHTS, ("static", "dynamic")
        )
    ),
    MxConfig("dswiglu", ab_dtype=E5M2, d_dtype=E5M2),
    MxConfig("dswiglu", ab_dtype=E5M2),
    MxConfig("dswiglu", d_dtype=E5M2),
    MxConfig("dswiglu", c_dtype=E4M3),
    MxConfig("dswiglu", c_dtype=FP32),
]
DEFAULT = SHIPPED[0]  # dswiglu, e4m3 in and out, bf16 C, dbias, dense K-major, static


def key_fields(config: MxConfig) -> tuple:
    """The variant key fields a config fixes, as installed_key_fields gives them."""
    return (
        DTYPE_NAMES[config.ab_dtype],
        DTYPE_NAMES[config.c_dtype],
        DTYPE_NAMES[config.d_dtype],
        config.act_func,
        tuple(sorted(config.act_params.items())),
        config.dbias,
        config.weight_mode,
        config.b_major,
        config.scheduler,
        TILE,
        CLUSTER,
        False,  # deterministic
        False,  # act_out
    )


def installed_key_fields(key) -> tuple:
    """key_fields of an installed variant's key (dglu.contract.schema.VariantKey)."""
    return (
        key.ab_dtype,
        key.c_dtype,
        key.d_dtype,
        key.act_func,
        tuple(sorted(key.act_params)),
        key.dbias,
        key.weight_mode,
        key.b_major,
        key.scheduler,
        (key.tile_m, key.tile_n),
        (key.cluster_m, key.cluster_n),
        key.deterministic,
        key.act_out,
    )


