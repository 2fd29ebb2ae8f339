"""Variant names never change: they name the manifest's variants, the shipped wheel's cubins
and kernel symbols, and the dispatch rules. The fixtures under data/ hold the names
dglu.contract.keys.variant_name gave before the KeyField table made them (captured at commit
7af6546 by running this file as a script): every variant of kernel_specs/default.yaml, in
the spec's order, and the keys of ``suffix_keys`` and ``sparse_keys`` below, which give every name part that
default.yaml does not (discrete_col_sfd, use_single_group_runtime_offsets)
alone and combined. Run as a script, this file writes the fixtures from the current code:
do that only from a commit whose names are known to be right."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_NAMES = DATA / "default_variant_names.txt"
SUFFIX_NAMES = DATA / "variant_name_suffixes.txt"

BASE_KEY: dict[str, Any] = {
    "arch": "sm_90a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dgeglu",
    "act_params": {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0},
    "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128, "cluster_m": 1,
    "cluster_n": 1, "scheduler": "static",
}
OTHER_PARAMS = {"geglu_alpha": 1.0, "glu_clamp_max": 10.0, "glu_clamp_min": -10.0, "linear_offset": 0.0}


def suffix_keys() -> list[dict[str, Any]]:
    """Every combination of the fields whose non-default values append to a name, each key
    giving every field."""
    keys = []
    for consumer, deterministic, act_out, dcs, sgo, experts, params in itertools.product(
        ("cooperative", "pingpong", "cooperative_rf"), (False, True),
        (False, True), (False, True), (False, True), (0, 8), (BASE_KEY["act_params"], OTHER_PARAMS),
    ):
        keys.append({**BASE_KEY, "act_params": params, "consumer": consumer,
                     "deterministic": deterministic, "act_out": act_out, "discrete_col_sfd": dcs,
                     "use_single_group_runtime_offsets": sgo, "experts": experts})
    return keys


def sparse_keys() -> list[dict[str, Any]]:
    """Keys that leave the defaulted fields out, as a spec entry or manifest key may."""
    keys = [dict(BASE_KEY)]
    keys.append({**BASE_KEY, "act_func": "dswiglu", "act_params": {}, "dbias": False, "consumer": "pingpong"})
    keys.append({**BASE_KEY, "arch": "sm_100a", "tile_m": 256, "tile_n": 256, "cluster_m": 2, "experts": 16})
    keys.append({**BASE_KEY, "ab_dtype": "e4m3", "d_dtype": "e4m3", "act_out": True})
    return keys


def default_names() -> list[str]:
    from dglu_build.specs import load_specs

    return [variant.name for variant in load_specs(REPO_ROOT / "kernel_specs" / "default.yaml")]


def suffix_names() -> list[str]:
    from dglu.contract.keys import variant_name

    return [variant_name(key) for key in (*suffix_keys(), *sparse_keys())]


def test_default_variants_keep_their_names() -> None:
    assert default_names() == DEFAULT_NAMES.read_text().splitlines()


def test_every_name_part_is_as_it_was() -> None:
    assert suffix_names() == SUFFIX_NAMES.read_text().splitlines()


def test_the_names_are_unique() -> None:
    names = suffix_names()[:len(suffix_keys())]
    assert len(set(names)) == len(names)


if __name__ == "__main__":  # write the fixtures from the current code
    sys.path[:0] = [str(REPO_ROOT / "codegen"), str(REPO_ROOT / "runtime")]
    DATA.mkdir(exist_ok=True)
    DEFAULT_NAMES.write_text("".join(f"{name}\n" for name in default_names()))
    SUFFIX_NAMES.write_text("".join(f"{name}\n" for name in suffix_names()))
