"""The FFI handler's work: a decoded call in, the variant's memsets and kernels enqueued on
XLA's stream out (through dglu.external: XLA owns every buffer, workspaces included).

The first call with given buffer addresses (XLA never captures that one in a command
buffer; notes/jax_ffi.md) checks the buffers against the variant of its device's
architecture with the torch path's checks (dglu.jax.checks), loads it, encodes the TMA
descriptors and packs the parameters. The plan is cached by attributes, device, stream and
every buffer's address, dtype and dims, so a later call, e.g. one XLA captures with new
addresses, only encodes and packs on the host: no allocation, synchronisation, module load
or read of device memory; a repeated call only issues cuMemsetD32Async and cuLaunchKernelEx.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import call
from ..cache import BoundedCache
from ..external import enqueue, given_workspaces, plan_call
from ..runner import CallPlan, load_variant
from .arrays import ArrayDevice, array_spec
from .checks import describe_call, family_policy
from .config import decode_attributes
from .ffi import Buffer, DecodedCall

PLAN_CAPACITY = 256
HANDLER_ARCH_SOURCE = "the device XLA runs the call on"
_plans: BoundedCache[CallPlan] = BoundedCache(PLAN_CAPACITY)


def handle(call: DecodedCall) -> None:
    """Enqueue the op for ``call``'s buffers on its stream (see the module docstring)."""
    from cuda.bindings import driver

    device, stream = call.device_ordinal(), call.stream()
    key = (tuple(call.attrs.items()), device, stream, call.args, call.rets)
    plan = _plans.get_or_make(
        key, lambda: plan_of(call.args, call.rets, call.attrs, device, stream)
    )
    enqueue(plan, device, driver.CUstream(stream))


def plan_of(
    args: tuple[Buffer, ...],
    rets: tuple[Buffer, ...],
    attrs: Mapping[str, Any],
    device: int,
    stream: int,
) -> CallPlan:
    """The plan of a call with these buffers and attributes on ``device`` and ``stream``."""
    decoded = decode_attributes(attrs)
    config = decoded.config
    results = dict(zip(decoded.results + decoded.workspaces, rets, strict=True))
    place, b_major = ArrayDevice("cuda", device), config.options.b_major
    buffers = dict(zip(decoded.operands, args, strict=True))
    buffers.update((role, results[role]) for role in decoded.results)  # dprob: its alias
    arrays = {
        role: (call.ARGUMENT_NAMES[role], array_spec(role, b.dims, b.dtype, b.data, place, b_major))
        for role, b in buffers.items()
    }
    arch = call.device_arch(device)
    policy = family_policy(arrays["a"][0], arrays["a"][1].dtype, arch)
    variant, problem = describe_call(config, policy, arrays, arch, HANDLER_ARCH_SOURCE, later=())
    loaded = load_variant(variant, device)
    workspaces = given_workspaces(
        variant,
        problem.scalars,
        {name: (results[name].data, results[name].size) for name in decoded.workspaces},
    )
    zeroed = tuple(
        role
        for role in decoded.results
        if role not in decoded.operands and variant.arguments[role].io == "accumulate"
    )
    return plan_call(loaded, problem, stream, workspaces, zeroed)


def clear_plans() -> None:
    """Forget every cached plan (e.g. between tests)."""
    _plans.clear()
