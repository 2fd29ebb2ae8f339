"""The variant matrix the GPU suite covers: what kernel_specs/default.yaml ships.

A Config is one shipped variant as a caller reaches it: the activation and its compiled
constants, C's and D's dtypes, dbias on or off, the tile, dense or discrete weights (and
b_major), the scheduler and the cluster. SHIPPED lists them; a test checks it against the
installed manifest, so the matrix and the wheel cannot drift apart.
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
WIDE, NARROW, WIDER = (128, 128), (128, 64), (128, 256)
SLIM = (64, 256)  # ping-pong: one warpgroup's m64n256 tile


@dataclass(frozen=True)
class Config:
    """One shipped variant, as the arguments of a call select it."""

    activation: str  # a key of ACTIVATIONS
    c_dtype: torch.dtype
    d_dtype: torch.dtype
    dbias: bool
    tile: tuple[int, int]
    weight_mode: str = "dense"  # or "discrete": per-expert matrices behind b_ptrs
    b_major: str = "k"  # of discrete weights' (N, K) matrices
    scheduler: str = "static"  # or "dynamic" (use_dynamic_sched=True)
    cluster: tuple[int, int] = (1, 1)
    deterministic: bool = False  # the bitwise reproducible variant (deterministic=True)

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
        """The activation arguments of the wrapper and the class API."""
        return {"act_func": self.act_func, **self.act_params}

    def launch_kwargs(self) -> dict[str, object]:
        """The scheduler, cluster and b_major arguments (the 1x1 cluster left to its default)."""
        return {
            "use_dynamic_sched": self.scheduler == "dynamic",
            "cluster_shape_mn": None if self.cluster == (1, 1) else self.cluster,
            "b_major": self.b_major,
            "deterministic": self.deterministic,
        }

    def __str__(self) -> str:
        dtypes = f"{DTYPE_NAMES[self.c_dtype]}-{DTYPE_NAMES[self.d_dtype]}"
        dbias = "dbias" if self.dbias else "nodbias"
        text = f"{self.activation}-{dtypes}-{dbias}-{self.tile[0]}x{self.tile[1]}"
        if self.discrete:
            text += f"-discrete-{self.b_major}"
        if self.cluster != (1, 1):
            text += f"-cluster{self.cluster[0]}x{self.cluster[1]}"
        text += "-dynamic" if self.scheduler == "dynamic" else ""
        return text + ("-det" if self.deterministic else "")


def _configs(activations, c_dtype, d_dtype, tile, **launch) -> list[Config]:
    return [
        Config(activation, c_dtype, d_dtype, dbias, tile, **launch)
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
    *_configs(["dswiglu", "dgeglu"], FP16, BF16, WIDE),
    *_configs(["dswiglu", "dgeglu"], BF16, FP16, WIDE),
    *_configs(["dswiglu", "dgeglu"], FP32, FP16, NARROW),
    *_configs(["dswiglu", "dgeglu"], FP16, FP32, NARROW),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, weight_mode="discrete", b_major="k"),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, weight_mode="discrete", b_major="n"),
    *_configs(["dswiglu"], BF16, BF16, WIDE, scheduler="dynamic"),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, cluster=(2, 1)),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDER, cluster=(2, 1)),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, SLIM, cluster=(2, 1)),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, deterministic=True),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, scheduler="dynamic", deterministic=True),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, weight_mode="discrete", b_major="k", deterministic=True),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDE, cluster=(2, 1), deterministic=True),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, WIDER, cluster=(2, 1), deterministic=True),
    *_configs(["dswiglu", "dgeglu"], BF16, BF16, SLIM, cluster=(2, 1), deterministic=True),
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
        config.weight_mode,
        config.b_major,
        config.scheduler,
        config.cluster,
        config.deterministic,
    )


def installed_key_fields(key) -> tuple | None:
    """key_fields of an installed variant's key (dglu.manifest.VariantKey); None when the
    variant is outside what this suite calls (A and B of another dtype than bf16, or an
    act_out variant: test_act_out_gpu.py runs those beside their siblings)."""
    if key.ab_dtype != "bf16" or key.act_out:
        return None
    return (
        key.act_func,
        tuple(sorted(key.act_params)),
        key.c_dtype,
        key.d_dtype,
        key.dbias,
        (key.tile_m, key.tile_n),
        key.weight_mode,
        key.b_major,
        key.scheduler,
        (key.cluster_m, key.cluster_n),
        key.deterministic,
    )
