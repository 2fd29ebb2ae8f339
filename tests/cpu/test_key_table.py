"""One KeyField table (dglu.contract.keys.KEY_TABLE) names every variant key field: the key
record, the manifest reader's field list and defaults, the selection's request, the
no-variant message's sources and build command, `dglu-build add`'s options and the variant
names (test_variant_names.py)."""

from __future__ import annotations

import shlex

from dglu.call import CLASS_SOURCES, WRAPPER_SOURCES
from dglu.contract.keys import KEY_FIELD_DEFAULTS, KEY_FIELDS, KEY_TABLE, build_command
from dglu.contract.schema import VariantKey
from dglu.selection import VariantRequest

from conftest_runtime import variant_key

NAMES = tuple(field.name for field in KEY_TABLE)


def test_the_key_record_and_the_request_have_the_tables_fields() -> None:
    assert VariantKey._fields == NAMES == tuple(KEY_FIELDS)
    assert VariantRequest._fields == NAMES
    assert VariantKey._field_defaults == KEY_FIELD_DEFAULTS == {
        "consumer": "cooperative", "deterministic": False, "act_out": False,
        "discrete_col_sfd": False, "use_single_group_runtime_offsets": False, "experts": 0,
    }
    # a request leaves the launch shape, consumer and expert count open (None: any)
    # and takes the key's defaults of the flags
    assert VariantRequest._field_defaults == {
        "tile_m": None, "tile_n": None, "cluster_m": None, "cluster_n": None, "scheduler": None, "consumer": None,
        "deterministic": False, "act_out": False, "discrete_col_sfd": False,
        "use_single_group_runtime_offsets": False, "experts": None,
    }
    assert tuple(WRAPPER_SOURCES) == tuple(CLASS_SOURCES) == NAMES


def test_add_offers_an_option_per_field_with_the_tables_names_and_help() -> None:
    from dglu_build.cli import add

    options = {option: param for param in add.params for option in (*param.opts, *param.secondary_opts)}
    for field in KEY_TABLE:
        assert field.option in options, field.name
        assert field.description in (options[field.option].help or ""), field.name
        if field.negated:
            assert field.negated in options, field.name


def test_the_build_command_parses_back_into_the_key() -> None:
    from dglu_build.cli import add

    key = variant_key(act_func="dgeglu", dbias=False, tile_n=64, deterministic=True, act_out=True,
                      discrete_col_sfd=True, use_single_group_runtime_offsets=True, act_params={"geglu_alpha": 1.0})
    words = shlex.split(build_command(key))[2:]
    context = add.make_context("add", words)
    given = context.params
    assert given["act_func"] == ("dgeglu",) and dict(given["act_params"]) == {"geglu_alpha": 1.0}
    assert given["dbias"] is False and given["deterministic"] is True and given["act_out"] is True
    assert given["discrete_col_sfd"] is True and given["use_single_group_runtime_offsets"] is True
    assert given["tiles"] == ((128, 64),) and given["clusters"] == ((1, 1),)
    for name in ("arch", "ab_dtype", "c_dtype", "d_dtype", "weight_mode", "b_major", "scheduler"):
        assert given[name] == (key[name],), name


def test_the_runtime_runs_a_call_without_a_family_table() -> None:
    """The runtime selects from manifest data alone: no module of dglu (the contract
    included; the families are the build side's plugins) names a family table."""
    from pathlib import Path

    import dglu

    package = Path(dglu.__file__).parent
    for path in package.rglob("*.py"):
        text = path.read_text()
        assert "FAMILIES" not in text and "family_of" not in text, path
