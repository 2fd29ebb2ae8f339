"""The installed dispatch rules a family's calls can take, and a problem inside a rule."""

from __future__ import annotations

from collections.abc import Callable

import torch
from dglu.manifest import installed_dispatch, installed_variants
from dglu.selection import arch_for_capability
from inputs import Shape


def rules_taken(of_family: Callable[[object], bool]) -> list:
    """The installed rules of this device's architecture whose choice some installed
    variant that ``of_family`` accepts has (a rule of another family's fields is passed
    over by these calls: dglu.contract.dispatch)."""
    arch = arch_for_capability(torch.cuda.get_device_capability())
    variants = [variant for variant in installed_variants(arch) if of_family(variant)]
    return [
        rule
        for rule in installed_dispatch()
        if rule.arch == arch
        and any(all(getattr(v.key, field) == value for field, value in rule.choose) for v in variants)
    ]


def shape_inside(rule) -> Shape:
    """A problem within ``rule``'s bounds: N at its upper bound (else its lower one rounded
    up to 64, else 256), 4 equal experts of at least its rows, K at its lower bound rounded
    up to 64, else 64 (unbounded L)."""
    bounds = dict(rule.when)
    n = bounds.get("max_n") or -(-bounds.get("min_n", 256) // 64) * 64
    rows = -(-max(bounds.get("min_m", 1024), 1024) // 1024) * 256
    k = -(-max(bounds.get("min_k", 64), 64) // 64) * 64
    return Shape(n=n, k=k, expert_rows=(rows,) * 4)
