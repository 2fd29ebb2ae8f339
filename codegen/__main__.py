"""``python -m codegen``: compile a spec file into an artifact directory."""

from __future__ import annotations

import os
from pathlib import Path

import click

from codegen.abi_check import AbiMismatch
from codegen.build import BuildError, build_artifacts
from codegen.specs import SpecError, load_specs

REPO_ROOT = Path(__file__).resolve().parent.parent


def user_variant_dir() -> Path:
    """The directory the dglu runtime searches for user-built variants."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "dglu" / "variants"


@click.command(name="dglu-build")
@click.option(
    "--specs",
    type=click.Path(dir_okay=False, path_type=Path),
    default=REPO_ROOT / "kernel_specs" / "default.yaml",
    show_default=True,
    help="Spec file listing the variants to compile.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=user_variant_dir,
    show_default="$XDG_CACHE_HOME/dglu/variants, which the dglu runtime searches",
    help="Artifact directory to write the cubins and manifest.json into (its manifest is replaced).",
)
def main(specs: Path, out: Path) -> None:
    """Compile every variant of SPECS into OUT (no GPU needed)."""
    try:
        variants = load_specs(specs)
        manifest = build_artifacts(variants, out)
    except (SpecError, BuildError, AbiMismatch) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"wrote {len(manifest['variants'])} variants and manifest.json to {out}")


if __name__ == "__main__":
    main()
