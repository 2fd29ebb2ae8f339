"""The contract is separable: importing it runs the standard library alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
CONTRACT_MODULES = ("keys", "element_types", "expressions", "schema", "reader", "writer", "errors")

# Run in a fresh interpreter: list the modules that importing the contract added whose
# top-level package is neither the standard library's nor dglu's own.
_PROBE = """
import json, sys
before = set(sys.modules)
import dglu.contract.{names}
added = set(sys.modules) - before
top = {{name.split(".")[0] for name in added}}
print(json.dumps({{
    "foreign": sorted(t for t in top if t != "dglu" and t not in sys.stdlib_module_names),
    "dglu": sorted(n for n in added if n.startswith("dglu")),
}}))
"""


def test_contract_imports_only_the_standard_library() -> None:
    probe = _PROBE.format(names=", dglu.contract.".join(CONTRACT_MODULES))
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(RUNTIME)},
        capture_output=True,
        text=True,
        check=True,
    )
    imported = json.loads(result.stdout)
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
