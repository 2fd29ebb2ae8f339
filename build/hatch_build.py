"""Hatchling build hook: compile the cubins into the wheel as dglu/_cubins/.

The variants come from kernel_specs/default.yaml, or from the spec file
named by the environment variable DGLU_SPECS (a path, relative to the
source tree or absolute). Compiling needs CuTe DSL (a build requirement)
but no GPU; the wheel itself does not need CuTe DSL.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

DEFAULT_SPECS = Path("kernel_specs") / "default.yaml"
PACKAGE_DIR = "dglu/_cubins"


class CubinBuildHook(BuildHookInterface):
    """Compiles the spec's variants and adds the artifact directory to the wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        """Build the cubins and manifest into a temp dir and include it."""
        if self.target_name != "wheel" or version == "editable":
            return  # an editable install has no cubins: use `python -m codegen` (user variant dir)
        root = Path(self.root)
        source = "DGLU_SPECS" if "DGLU_SPECS" in os.environ else "default specs"
        specs = root / os.environ.get("DGLU_SPECS", str(DEFAULT_SPECS))
        if not specs.is_file():
            raise FileNotFoundError(f"{source}: spec file {specs} does not exist")
        sys.path.insert(0, str(root))
        from codegen.build import build_artifacts
        from codegen.specs import load_specs

        variants = load_specs(specs)
        self._out_dir = Path(tempfile.mkdtemp(prefix="dglu-cubins-"))
        self.app.display_info(f"dglu: compiling {len(variants)} variants from {specs}")
        build_artifacts(variants, self._out_dir, progress=self.app.display_info)
        for path in sorted(self._out_dir.iterdir()):
            build_data["force_include"][str(path)] = f"{PACKAGE_DIR}/{path.name}"

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        """Remove the temp artifact directory once the wheel holds it."""
        if hasattr(self, "_out_dir"):
            shutil.rmtree(self._out_dir, ignore_errors=True)
