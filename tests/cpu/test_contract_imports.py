"""The contract is separable: importing it runs the standard library alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
CONTRACT = RUNTIME / "dglu" / "contract"

# Run in a fresh interpreter: import every submodule of the contract (found by pkgutil, so
# a new one is covered), then list the modules that importing them added whose top-level
# package is neither the standard library's nor dglu's own.
_PROBE = """
import importlib, json, pkgutil, sys
before = set(sys.modules)
import dglu.contract
walked = [m.name for m in pkgutil.iter_modules(dglu.contract.__path__, "dglu.contract.")]
for name in walked:
    importlib.import_module(name)
added = set(sys.modules) - before
top = {name.split(".")[0] for name in added}
print(json.dumps({
    "walked": walked,
    "foreign": sorted(t for t in top if t != "dglu" and t not in sys.stdlib_module_names),
    "dglu": sorted(n for n in added if n.startswith("dglu")),
}))
"""


def test_contract_imports_only_the_standard_library() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={"PYTHONPATH": str(RUNTIME)},
        capture_output=True,
        text=True,
        check=True,
    )
    imported = json.loads(result.stdout)
    assert sorted(imported["walked"]) == sorted(
        f"dglu.contract.{p.stem}" for p in CONTRACT.glob("*.py") if p.stem != "__init__"
    )
    assert imported["foreign"] == []
    # dglu's own modules: the package (lazy) and the contract, nothing of the runtime.
    assert all(n == "dglu" or n.startswith("dglu.contract") for n in imported["dglu"]), imported["dglu"]


def test_package_exports_every_error_class() -> None:
    """dglu's lazy export table names each of dglu.errors' classes (it lists them itself so
    that importing the contract imports no runtime module, dglu.errors included)."""
    import dglu
    import dglu.errors

    assert {n for n, m in dglu._EXPORTS.items() if m == ".errors"} == set(dglu.errors.__all__)


def test_package_names_resolve_on_first_use() -> None:
    probe = (
        "import sys, dglu; assert 'dglu.api' not in sys.modules; "
        "dglu.VariantNotFoundError; assert 'dglu.api' not in sys.modules; "
        "dglu.grouped_gemm_dglu_wrapper_sm90; assert 'dglu.api' in sys.modules; "
        "assert set(dglu.__all__) <= set(dir(dglu))"
    )
    subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(RUNTIME)}, check=True)
