"""Check that the kernels still build the baseline's cubins, byte for byte.

Compiles every variant of a baseline artifact directory (its manifest.json: name, key,
sha256, kernels, tma) with ``dglu_build.kernels.compile_variant`` and compares:
- the cubin's sha256 with the baseline's;
- the entry's fields (docs/manifest.md VARIANT less what the build adds);
- the entry's "kernels" (without the schema-v2 additions "attributes" and "expressions")
  and "tma" with the baseline manifest's.
Exits 1 on any difference. Usage (a Python with CuTe DSL):

    PYTHONPATH=codegen:runtime python ci/compare_kernels.py /work/artifacts_base [-j 2] [-k NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

V2_KERNEL_ADDITIONS = ("attributes", "expressions")
ENTRY_FIELDS = {"family", "m_aligned", "arguments", "scalars", "limits", "views", "workspaces", "kernels", "tma"}


def _compile(name: str, key: dict) -> tuple[str, str, dict]:
    """In a worker: the cubin's sha256 and the manifest entry of one variant."""
    from dglu_build.kernels import compile_variant

    result = compile_variant(key, "dglu_" + name)
    return name, hashlib.sha256(result.cubin).hexdigest(), result.entry


def _v1_kernels(kernels: list[dict]) -> list[dict]:
    return [{f: v for f, v in kernel.items() if f not in V2_KERNEL_ADDITIONS} for kernel in kernels]


def _differences(baseline: dict, sha256: str, entry: dict) -> list[str]:
    found = []
    if set(entry) != ENTRY_FIELDS:
        found.append(f"entry fields {sorted(entry)} are not {sorted(ENTRY_FIELDS)}")
    if sha256 != baseline["sha256"]:
        found.append(f"cubin sha256 {sha256[:16]} != baseline {baseline['sha256'][:16]}")
    if _v1_kernels(entry["kernels"]) != baseline["kernels"]:
        found.append("kernels differ:\n  got  " + json.dumps(_v1_kernels(entry["kernels"]))
                     + "\n  want " + json.dumps(baseline["kernels"]))
    if entry["tma"] != baseline["tma"]:
        found.append(f"tma differs:\n  got  {json.dumps(entry['tma'])}\n  want {json.dumps(baseline['tma'])}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="artifact directory with the baseline manifest.json")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("-k", "--only", help="compile only variants whose name contains this")
    args = parser.parse_args()
    variants = json.loads((args.baseline / "manifest.json").read_text())["variants"]
    baseline = {v["name"]: v for v in variants if not args.only or args.only in v["name"]}
    context = multiprocessing.get_context("spawn")
    failures = 0
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        futures = [pool.submit(_compile, name, v["key"]) for name, v in baseline.items()]
        for future in as_completed(futures):
            name, sha256, entry = future.result()
            found = _differences(baseline[name], sha256, entry)
            failures += bool(found)
            print(("DIFF " if found else "same ") + name, *found, sep="\n  " if found else "", flush=True)
    print(f"{len(baseline) - failures}/{len(baseline)} variants identical (cubin, kernels, tma)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
