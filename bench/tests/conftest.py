"""Import paths for the bench tests: the bench imports dglu_build (codegen/) and dglu
(runtime/), which the wheel installs and a plain checkout does not, so this tree's codegen/
and runtime/ go first (the repo root, for ``bench``, is put there by pytest)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for source in ("runtime", "codegen"):
    sys.path.insert(0, str(ROOT / source))
