"""Pick the prebuilt variant that matches a call.

Every given field of a request must equal the variant's key (act_params: the compiled
constants, compared as numbers). tile, cluster, scheduler and consumer take part only
when the request gives them; discrete_col_sfd and use_single_group_runtime_offsets only for
variants whose family compiles them in (its front policy's ``compiled_options``: the others
read them at run time, as kernel flags, or accept only False). Among the matches the largest tile wins, the first in selection order
(dglu.manifest) among equals: the default does not depend on how a build orders variants. A
call that leaves its launch shape open narrows the matches first by the dispatch table's rules
for its problem, in order (dglu.contract.dispatch), then to one CTA per cluster (each step
only where it leaves a match).
When nothing matches, the error names the request, the nearest variants (fewest
differing fields) and how to build the missing one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from .contract.keys import ARCH_OF_CAPABILITY, KEY_FIELDS, KEY_TABLE, build_command, key_record, variant_name
from .contract.reader import VariantEntry
from .contract.schema import Variant, VariantKey
from .errors import VariantNotFoundError

__all__ = ["VariantRequest", "build_command", "has_variant", "missing_variant_message", "select_variant"]

log = logging.getLogger("dglu")

NEAREST_SHOWN = 3
# open fields a missing-variant message does not list as "any": the expert count (shown as
# given) and the consumer, which no call argument sets
UNSHOWN_ANY = ("experts", "consumer")


def arch_for_capability(capability: tuple[int, int]) -> str | None:
    """The exact cubin architecture of a compute capability (an "a" target runs only on
    its own capability), or None when dglu has no name for it."""
    return ARCH_OF_CAPABILITY.get(tuple(capability))


def _wanted(self: Any) -> dict[str, Any]:
    """The fields a variant must match."""
    return {name: value for name, value in zip(self._fields, self) if value is not None}


# What a call needs: a Record of the KeyField table's fields in its order. A field a call may
# leave open (KeyField.request_any: the launch shape; the consumer, which no call
# argument sets; the expert count, the call's L, which a variant of experts 0 takes
# whatever it is) is None for "any"; the others take the key's default, if any.
# act_params as sorted (name, value) pairs.
VariantRequest = key_record(
    "VariantRequest", __name__, 'What a call needs; None in a launch-shape field means "any".',
    {field.name: None if field.request_any else field.default for field in KEY_TABLE
     if field.request_any or field.has_default},
    wanted=_wanted,
)


# request fields that select a variant only in a family that compiles them in
COMPILED_OPTIONS = ("discrete_col_sfd", "use_single_group_runtime_offsets")


def _differences(variant: Variant | VariantEntry, wanted: dict[str, Any]) -> list[str]:
    key = variant.key
    return [name for name, value in wanted.items() if getattr(key, name) != value and not _takes_any(variant, name)]


def _takes_any(variant: Variant | VariantEntry, name: str) -> bool:
    """A variant of experts 0 takes any expert count (its kernels read L at run time); one
    whose family does not compile in an option of COMPILED_OPTIONS takes any value of it
    (dglu.options.check_flags then checks its kernel flags)."""
    if name == "experts":
        return variant.key.experts == 0
    return name in COMPILED_OPTIONS and name not in variant.front.compiled_options


def _matcher(wanted: dict[str, Any]) -> Callable[[Variant | VariantEntry], bool]:
    """A function telling whether a variant matches every field of ``wanted`` (as
    _differences finds none): one tuple comparison per key (selection reads every installed
    key); the options of COMPILED_OPTIONS looked at by _differences only where they differ."""
    exact = _key_matcher(wanted)
    options = {name: wanted[name] for name in COMPILED_OPTIONS if name in wanted}
    if not options:
        return lambda variant: exact(variant.key)
    rest = _key_matcher({name: value for name, value in wanted.items() if name not in options})
    return lambda variant: exact(variant.key) or (rest(variant.key) and not _differences(variant, options))


def _key_matcher(wanted: dict[str, Any]) -> Callable[[VariantKey], bool]:
    """Whether a key equals every field of ``wanted`` (experts: or is 0), as one tuple comparison."""
    names = tuple(name for name in wanted if name != "experts")
    get = itemgetter(*(VariantKey._fields.index(name) for name in names))
    values = get(VariantKey._make(wanted.get(name) for name in VariantKey._fields))
    experts = wanted.get("experts")
    if experts is None:
        return lambda key: get(key) == values
    return lambda key: get(key) == values and key.experts in (0, experts)


def _show(name: str, value: Any) -> str:
    return f"{name}={dict(value) if name == 'act_params' else value}"


def _build_defaults() -> dict[str, Any]:
    """What a suggestion fills in when no installed variant can lend its fields: the
    defaults of ``dglu-build add``'s options (dglu.contract.keys.KEY_TABLE)."""
    return {field.name: field.build_default for field in KEY_TABLE}


def _suggested_key(request: VariantRequest, nearest: Variant | VariantEntry | None) -> dict[str, Any]:
    base = nearest.key.as_dict() if nearest else _build_defaults()
    entry = {name: base.get(name) for name in KEY_FIELDS}
    entry.update(request.wanted())
    entry["act_params"] = dict(request.act_params)
    if nearest is not None:
        # what its family takes at run time stays as its key has it (experts 0: any L;
        # options it reads as kernel flags: the build's default)
        entry.update({name: base[name] for name in ("experts", *COMPILED_OPTIONS)
                      if entry[name] != base[name] and _takes_any(nearest, name)})
    return entry


def missing_variant_message(
    request: VariantRequest,
    variants: Sequence[Variant | VariantEntry],
    searched: Sequence[str] = (),
    sources: Mapping[str, str] | None = None,
) -> str:
    """Why no variant matches, the nearest ones, and how to build the missing one.

    ``sources`` names, per field, the argument that set it (shown with the request).
    """
    wanted = request.wanted()
    sources = sources or {}
    any_fields = [name for name, value in zip(request._fields, request) if value is None and name not in UNSHOWN_ANY]
    lines = [
        "no prebuilt dglu kernel matches this call",
        "  requested: "
        + ", ".join(
            _show(n, v) + (f" (from {sources[n]})" if n in sources else "")
            for n, v in wanted.items()
        )
        + (f" (any {', '.join(any_fields)})" if any_fields else ""),
    ]
    ranked = sorted(variants, key=lambda v: len(_differences(v, wanted)))
    if ranked:
        lines.append("  nearest available variants (the fields that differ):")
        for variant in ranked[:NEAREST_SHOWN]:
            diffs = ", ".join(
                _show(n, getattr(variant.key, n)) for n in _differences(variant, wanted)
            )
            lines.append(f"    {variant.name}: {diffs}")
    else:
        lines.append("  no variants are installed")
    if searched:
        lines.append("  searched: " + "; ".join(searched))
    entry = _suggested_key(request, ranked[0] if ranked else None)
    lines += [
        f"  build it ({variant_name(entry)}) with:",
        f"    {build_command(entry)}",
        "  or add this entry to the `variants:` list of a kernel_specs/*.yaml file and rebuild:",
        f"    - {json.dumps(entry)}",
    ]
    return "\n".join(lines)


def has_variant(variants: Sequence[Variant | VariantEntry], request: VariantRequest) -> bool:
    """Whether some variant matches every given field of ``request``."""
    matches = _matcher(request.wanted())
    return any(matches(variant) for variant in variants)


def select_variant(
    variants: Sequence[Variant | VariantEntry],
    request: VariantRequest,
    searched: Sequence[str] = (),
    sources: Mapping[str, str] | None = None,
    preferences: Sequence[Mapping[str, Any]] = (),
) -> Variant | VariantEntry:
    """Of the variants matching every given field of ``request``, the one with the largest
    tile (the first in selection order among equals); ``preferences`` (key fields ->
    values, e.g. a dispatch rule's choice) narrow the matches first, in turn, each one
    that leaves some match."""
    match = _matcher(request.wanted())
    matches = [variant for variant in variants if match(variant)]
    if not matches:
        raise VariantNotFoundError(missing_variant_message(request, variants, searched, sources))
    for preference in preferences:
        preferred = [variant for variant in matches if not _differences(variant, preference)]
        if preferred:
            matches = preferred
    chosen = max(matches, key=lambda variant: variant.key.tile_m * variant.key.tile_n)
    log.debug("dglu: selected variant %s from %s", chosen.name, chosen.directory)
    return chosen
