"""Import paths for the bench tests: the bench imports dglu_build (codegen/), which the
wheel installs and a plain checkout does not, so this tree's codegen/ goes first (the repo
root, for ``bench``, is put there by pytest)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "codegen"))
