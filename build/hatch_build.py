"""Hatchling build hook: compile the cubins into the wheel as dglu/_cubins/.

The variants come from kernel_specs/default.yaml, or from the spec files
named by the environment variable DGLU_SPECS (paths separated by
os.pathsep, relative to the source tree or absolute). They are built in the
artifact directory DGLU_BUILD_DIR (incrementally: `dglu-build wheel` has
built them there already), or in a temporary one when it is unset; the wheel
gets a copy of exactly these variants, taken under the directory's lock, and the
spec files' dispatch rules as dglu/_cubins/dispatch.json.
Compiling needs CuTe DSL (a build requirement) but no GPU; the wheel's
runtime does not need CuTe DSL.
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
    """Builds the spec's variants and adds a copy of them to the wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        """Build the variants, copy them into a temp dir and include it."""
        if self.target_name != "wheel" or version == "editable":
            return  # an editable install has no cubins: `dglu-build add/compile` fill the user variant dir
        root = Path(self.root)
        sys.path[:0] = [str(root / "codegen"), str(root / "runtime")]
        from dglu_build.artifact_store import open_store
        from dglu_build.build import BuildFailed, build_in_store, write_dispatch
        from dglu_build.compile_pool import available_cores
        from dglu_build.kernels import compile_variant
        from dglu_build.progress import LineProgress
        from dglu_build.specs import load_dispatch_files, load_spec_files
        from dglu_build.wheel import ENV_BUILD_DIR, ENV_SPECS, write_notices

        source = ENV_SPECS if ENV_SPECS in os.environ else "default specs"
        specs = [root / path for path in os.environ.get(ENV_SPECS, str(DEFAULT_SPECS)).split(os.pathsep)]
        for path in specs:
            if not path.is_file():
                raise FileNotFoundError(f"{source}: spec file {path} does not exist")

        variants = load_spec_files(specs)
        self._temp_dir = Path(tempfile.mkdtemp(prefix="dglu-cubins-"))
        build_dir = Path(os.environ.get(ENV_BUILD_DIR) or self._temp_dir / "build")
        packed = self._temp_dir / "packed"
        self.app.display_info(f"dglu: building {len(variants)} variants from {', '.join(map(str, specs))} in {build_dir}")
        with open_store(build_dir, self.app.display_info) as store:
            progress = LineProgress(self.app.display_info)
            result = build_in_store(store, variants, available_cores(), progress, compile_variant)
            if result.failed:
                raise BuildFailed(result)
            store.copy_to(packed, [variant.name for variant in variants])
        write_notices(packed, [variant.key for variant in variants])
        write_dispatch(packed, load_dispatch_files(specs, variants))
        for path in sorted(p for p in packed.rglob("*") if p.is_file()):
            build_data["force_include"][str(path)] = f"{PACKAGE_DIR}/{path.relative_to(packed).as_posix()}"

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        """Remove the temp directory once the wheel holds its copy."""
        if hasattr(self, "_temp_dir"):
            shutil.rmtree(self._temp_dir, ignore_errors=True)
