"""The modules a call passes through, in order: a first wrapper call and a steady execute
on the CPU stand-in of bench.standin_host (same problem, same replacements), traced with
sys.setprofile. Consecutive calls within one module are folded; the leaf modules (the
contract, driver, TMA, parameter, grid and workspace helpers) are left out of the front
door's path, which is printed with the total of module visits.

    LD_LIBRARY_PATH=DIR python -m bench.call_path --artifacts ART
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

LEAVES = ("contract/", "dtypes.py", "problem.py", "grid.py", "tma.py", "params.py", "launch.py",
          "driver.py", "integrity.py", "workspaces.py", "occupancy.py")


def modules_visited(call: Callable[[], Any]) -> list[str]:
    """dglu's modules (paths under dglu/) entered during ``call()``, repeats folded."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        path = frame.f_code.co_filename
        if event == "call" and "/dglu/" in path:
            module = path.split("/dglu/", 1)[1]
            if not seen or seen[-1] != module:
                seen.append(module)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def front_door(visited: list[str]) -> list[str]:
    """``visited`` without the leaf modules, repeats folded again."""
    path: list[str] = []
    for module in visited:
        if not module.startswith(LEAVES) and (not path or path[-1] != module):
            path.append(module)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", required=True, help="an artifact directory (DGLU_CUBIN_PATH)")
    args = parser.parse_args()
    os.environ["DGLU_CUBIN_PATH"] = args.artifacts
    os.environ["XDG_CACHE_HOME"] = "/nonexistent-dglu-standin"
    os.environ["FAKECUDA_CTX_CURRENT"] = "1"
    import dglu

    from bench import standin_host

    standin_host.install()
    t = standin_host.tensors()
    wrapper = functools.partial(dglu.grouped_gemm_dglu_wrapper_sm90, **t, act_func="dswiglu", generate_dbias=True)
    first = modules_visited(wrapper)
    d_row, dbias = standin_host.execute_outputs(t)
    op = dglu.GroupedGemmDglu(
        sample_a=t["a_tensor"], sample_c=t["c_tensor"], sample_d_row=d_row,
        sample_padded_offsets=t["padded_offsets"], sample_alpha=t["alpha_tensor"],
        sample_beta=t["beta_tensor"], sample_prob=t["prob_tensor"],
        sample_dprob=t["dprob_tensor"], sample_dbias=dbias, sample_b=t["b_tensor"],
        act_func="dswiglu",
    )
    op.compile()
    execute = functools.partial(op.execute, **t, d_row_tensor=d_row, dbias_tensor=dbias)
    execute()
    steady = modules_visited(execute)
    for name, visited in (("first wrapper call", first), ("steady execute", steady)):
        path = front_door(visited)
        print(f"{name}: {len(visited)} module visits, {len(set(visited))} modules; "
              f"front door: {len(path)} visits")
        print("  " + " -> ".join(path))


if __name__ == "__main__":
    main()
