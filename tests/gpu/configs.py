"""The variant matrix the GPU suite covers: what kernel_specs/default.yaml ships.

A Config is one shipped variant as a caller reaches it: the activation and its compiled
constants, C's and D's dtypes, dbias on or off, and the tile. SHIPPED lists them; a test
checks it against the installed manifest, so the matrix and the wheel cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product

import torch

GEGLU_DEFAULTS = {
    "geglu_alpha": 1.702,
    "glu_clamp_max": 7.0,
    "glu_clamp_min": -7.0,
    "linear_offset": 1.0,
}
DEEPSEEK_V4 = {
    "geglu_alpha": 1.0,
    "glu_clamp_max": 10.0,
    "glu_clamp_min": -10.0,
    "linear_offset": 0.0,
}
SITU_DEFAULTS = {"situ_beta1": 4.0, "situ_beta2": 25.0}

# Activation label -> (act_func, its compiled constants).
ACTIVATIONS: dict[str, tuple[str, Mapping[str, float]]] = {
    "dswiglu": ("dswiglu", {}),
    "dgeglu": ("dgeglu", GEGLU_DEFAULTS),
    "dgeglu_dsv4": ("dgeglu", DEEPSEEK_V4),
    "dsituglu": ("dsituglu", SITU_DEFAULTS),
}
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
WIDE, NARROW = (128, 128), (128, 64)


@dataclass(frozen=True)
class Config:
    """One shipped variant, as the arguments of a call select it."""

    activation: str  # a key of ACTIVATIONS
    c_dtype: torch.dtype
    d_dtype: torch.dtype
    dbias: bool
    tile: tuple[int, int]

    @property
    def act_func(self) -> str:
        return ACTIVATIONS[self.activation][0]

    @property
    def act_params(self) -> dict[str, float]:
        return dict(ACTIVATIONS[self.activation][1])

    def act_kwargs(self) -> dict[str, object]:
        """The activation arguments of the wrapper and the class API."""
        return {"act_func": self.act_func, **self.act_params}

    def __str__(self) -> str:
        dtypes = f"{DTYPE_NAMES[self.c_dtype]}-{DTYPE_NAMES[self.d_dtype]}"
        dbias = "dbias" if self.dbias else "nodbias"
        return f"{self.activation}-{dtypes}-{dbias}-{self.tile[0]}x{self.tile[1]}"


def _configs(activations, c_dtype, d_dtype, tile) -> list[Config]:
    return [
        Config(activation, c_dtype, d_dtype, dbias, tile)
        for activation, dbias in product(activations, (True, False))
    ]


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
SHIPPED: list[Config] = [
    *_configs(ACTIVATIONS, BF16, BF16, WIDE),
    *_configs(["dswiglu"], BF16, BF16, NARROW),
    *_configs(["dswiglu", "dgeglu"], FP16, FP16, WIDE),
    *_configs(["dswiglu", "dgeglu"], FP32, FP32, NARROW),
    *_configs(["dswiglu", "dgeglu"], FP32, BF16, NARROW),
    *_configs(["dswiglu", "dgeglu"], BF16, FP32, NARROW),
]


def key_fields(config: Config) -> tuple:
    """The fields of a variant key that a Config fixes, as installed_key_fields gives them."""
    return (
        config.act_func,
        tuple(sorted(config.act_params.items())),
        DTYPE_NAMES[config.c_dtype],
        DTYPE_NAMES[config.d_dtype],
        config.dbias,
        config.tile,
    )


def installed_key_fields(key) -> tuple | None:
    """key_fields of an installed variant's key (dglu.manifest.VariantKey); None when the
    variant is outside what this suite calls (another weight mode, cluster or scheduler)."""
    launch = (key.ab_dtype, key.weight_mode, key.b_major, key.cluster_m, key.cluster_n)
    if launch != ("bf16", "dense", "k", 1, 1) or key.scheduler != "static":
        return None
    return (
        key.act_func,
        tuple(sorted(key.act_params)),
        key.c_dtype,
        key.d_dtype,
        key.dbias,
        (key.tile_m, key.tile_n),
    )
