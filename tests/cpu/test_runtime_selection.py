"""dglu.selection: picking the variant of a call, and the error when none matches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest_runtime import (
    DEFAULT_KEYS,
    GEGLU_DEFAULTS,
    variant_key,
    variant_name,
    write_artifacts,
)
from dglu.errors import VariantNotFoundError
from dglu.manifest import read_manifest
from dglu.contract.keys import variant_name as variant_name_of
from dglu.selection import VariantRequest, arch_for_capability, select_variant


@pytest.fixture
def variants(tmp_path: Path):
    write_artifacts(tmp_path, DEFAULT_KEYS)
    return read_manifest(tmp_path).variants


def request_for(**overrides) -> VariantRequest:
    """A request for the fields of variant_key(**overrides), launch shape left open."""
    key = variant_key(**overrides)
    fields = {
        name: key[name]
        for name in (
            "arch",
            "ab_dtype",
            "c_dtype",
            "d_dtype",
            "act_func",
            "dbias",
            "weight_mode",
            "b_major",
        )
    }
    return VariantRequest(act_params=tuple(sorted(key["act_params"].items())), **fields)


@pytest.mark.parametrize("key", DEFAULT_KEYS[:4], ids=variant_name)
def test_exact_match_picks_that_variant(variants, key) -> None:
    request = request_for(**key)._replace(
        tile_m=key["tile_m"],
        tile_n=key["tile_n"],
        cluster_m=1,
        cluster_n=1,
        scheduler="static",
    )
    assert select_variant(variants, request).name == variant_name(key)


def test_open_tile_takes_the_largest_in_any_manifest_order(variants) -> None:
    request = request_for(act_func="dswiglu", dbias=True)
    assert select_variant(variants, request).name == variant_name(DEFAULT_KEYS[4])  # 128x256
    reordered = (variants[4],) + tuple(variants[:4])
    assert select_variant(reordered, request).name == variant_name(DEFAULT_KEYS[4])


def test_equal_tiles_take_the_first_in_selection_order(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_artifacts(first, [variant_key(tile_n=64)])
    write_artifacts(second, [variant_key(tile_m=64, tile_n=128)])
    both = read_manifest(first).variants + read_manifest(second).variants
    request = request_for(act_func="dswiglu", dbias=True)
    assert select_variant(both, request).cubin_path.parent == first
    assert select_variant(both[::-1], request).cubin_path.parent == second


def test_given_tile_and_cluster_are_matched(variants) -> None:
    request = request_for(act_func="dswiglu", dbias=True)._replace(
        tile_m=128,
        tile_n=256,
        cluster_m=1,
        cluster_n=1,
    )
    assert select_variant(variants, request).name == variant_name(DEFAULT_KEYS[4])


def test_act_params_compare_as_numbers(variants) -> None:
    params = {**GEGLU_DEFAULTS, "glu_clamp_max": 7, "glu_clamp_min": -7}
    request = request_for(act_func="dgeglu", dbias=False)._replace(act_params=tuple(sorted(params.items())))
    assert select_variant(variants, request).name == variant_name(DEFAULT_KEYS[3])


def test_other_act_params_do_not_match(variants) -> None:
    params = {**GEGLU_DEFAULTS, "geglu_alpha": 1.0}
    request = request_for(act_func="dgeglu", dbias=False)._replace(act_params=tuple(sorted(params.items())))
    with pytest.raises(VariantNotFoundError, match="act_params=.*'geglu_alpha': 1.0"):
        select_variant(variants, request)


def test_missing_variant_error_names_nearest_and_how_to_build(variants) -> None:
    request = request_for(act_func="dgeglu", dbias=True, c_dtype="fp32")._replace(tile_m=128, tile_n=256)
    with pytest.raises(VariantNotFoundError) as error:
        select_variant(variants, request, ["/somewhere (package)"], {"c_dtype": "c_tensor"})
    message = str(error.value)
    lines = message.splitlines()

    assert "requested: arch=sm_90a" in message and "c_dtype=fp32 (from c_tensor)" in message
    assert "tile_n=256" in message and "(any cluster_m, cluster_n, scheduler)" in message
    nearest = lines[lines.index("  nearest available variants (the fields that differ):") + 1]
    # dgeglu+dbias 128x128 differs in c_dtype and tile_n only: no other variant is as close
    assert nearest == f"    {variant_name(DEFAULT_KEYS[2])}: c_dtype=bf16, tile_n=128"
    assert "searched: /somewhere (package)" in message

    built = next(i for i, line in enumerate(lines) if line.startswith("  build it ("))
    suggested = variant_key(act_func="dgeglu", dbias=True, c_dtype="fp32", tile_n=256)
    assert lines[built] == f"  build it ({variant_name_of(suggested)}) with:"
    command = lines[built + 1].strip()
    assert command.startswith("dglu-build add ")
    for flag in (
        "--act dgeglu",
        "--c-dtype fp32",
        "--tile 128x256",
        "--cluster 1x1",
        "--dbias",
        "--act-param geglu_alpha=1.702",
        "--scheduler static",
    ):
        assert flag in command
    entry = json.loads(lines[-1].strip().removeprefix("- "))
    assert entry == {**variant_key(act_func="dgeglu", dbias=True, c_dtype="fp32", tile_n=256), "consumer": "cooperative", "deterministic": False,
                     "act_out": False, "discrete_col_sfd": False,
                     "use_single_group_runtime_offsets": False, "experts": 0}


def test_missing_variant_with_nothing_installed() -> None:
    with pytest.raises(VariantNotFoundError) as error:
        select_variant((), request_for(act_func="dswiglu", dbias=False))
    message = str(error.value)
    assert "no variants are installed" in message
    entry = json.loads(message.splitlines()[-1].strip().removeprefix("- "))
    assert entry == {**variant_key(act_func="dswiglu", dbias=False), "consumer": "cooperative", "deterministic": False,
                     "act_out": False, "discrete_col_sfd": False,
                     "use_single_group_runtime_offsets": False, "experts": 0}
    assert "--no-dbias" in message


def test_missing_variant_for_any_arch_suggests_the_family_defaults() -> None:
    """A request that accepts any arch (JAX tracing without a GPU), with nothing installed:
    the suggestion takes the first arch, tile, cluster and scheduler its family allows."""
    request = request_for(act_func="dgeglu", dbias=True)._replace(arch=None)
    with pytest.raises(VariantNotFoundError) as error:
        select_variant((), request)
    entry = json.loads(str(error.value).splitlines()[-1].strip().removeprefix("- "))
    launch = {k: entry[k] for k in ("arch", "tile_m", "tile_n", "cluster_m", "cluster_n", "scheduler")}
    assert launch == {"arch": "sm_90a", "tile_m": 128, "tile_n": 128, "cluster_m": 1,
                      "cluster_n": 1, "scheduler": "static"}
    assert "--arch sm_90a" in str(error.value)


@pytest.mark.parametrize(
    ("capability", "arch"), [((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((10, 3), "sm_103a")]
)
def test_arch_of_a_capability_is_exact(capability, arch) -> None:
    assert arch_for_capability(capability) == arch


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (9, 1), (10, 1), (12, 0)])
def test_a_capability_without_an_arch_name(capability) -> None:
    assert arch_for_capability(capability) is None


def test_compiled_options_select_only_in_a_family_that_compiles_them_in() -> None:
    """discrete_col_sfd / use_single_group_runtime_offsets: a variant whose front policy lists
    them in compiled_options matches its key's value only; any other (a Hopper MXFP8 variant,
    which reads them at run time as kernel flags) matches either value."""
    from types import SimpleNamespace

    from dglu.contract.schema import VariantKey

    def made(name: str, compiled: tuple[str, ...], **fields) -> SimpleNamespace:
        key = VariantKey(**{**variant_key(tile_m=256, tile_n=256), "act_params": (), **fields})
        return SimpleNamespace(name=name, key=key, front=SimpleNamespace(compiled_options=compiled), directory=".")

    compiled = ("discrete_col_sfd", "use_single_group_runtime_offsets")
    flags = made("flags", ())
    plain, dcs = made("plain", compiled), made("dcs", compiled, discrete_col_sfd=True)
    ask = lambda **fields: request_for(tile_m=256, tile_n=256)._replace(act_params=(), **fields)  # noqa: E731
    assert select_variant([flags], ask(discrete_col_sfd=True)).name == "flags"
    assert select_variant([flags], ask(use_single_group_runtime_offsets=True)).name == "flags"
    assert select_variant([plain, dcs], ask(discrete_col_sfd=True)).name == "dcs"
    assert select_variant([dcs, plain], ask()).name == "plain"
    with pytest.raises(VariantNotFoundError, match="discrete_col_sfd=True") as missing:
        select_variant([plain], ask(discrete_col_sfd=True))
    assert "--discrete-col-sfd" in str(missing.value)
    # a Hopper call (the option a run-time flag) of a missing tile: the command builds its family's default
    with pytest.raises(VariantNotFoundError) as missing:
        select_variant([flags], ask(discrete_col_sfd=True, tile_m=128, tile_n=128))
    assert "--tile 128x128" in str(missing.value) and "--discrete-col-sfd" not in str(missing.value)
