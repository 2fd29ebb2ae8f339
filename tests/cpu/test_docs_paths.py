"""The README and docs are checked against the tree: every repository path they name exists,
and no tracked source or document cites the notes outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")), "bench/README.md")
TOP_LEVEL = ("bench", "build", "ci", "codegen", "docs", "kernel_specs", "runtime", "tests")
# Folders that a command creates when it runs, named in the docs as where its output goes.
OUTPUT_FOLDERS = ("bench/out/",)
# A path in backticks or a Markdown link that starts at one of the repository's top folders.
_PATH = re.compile(r"(?:`|\]\()((?:%s)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])" % "|".join(TOP_LEVEL))


def named_paths(text: str) -> list[str]:
    """The repository paths ``text`` names (glob patterns and placeholders left out)."""
    return [
        p for p in _PATH.findall(text) if not any(c in p for c in "*<>") and p not in OUTPUT_FOLDERS
    ]


def test_named_paths_are_found() -> None:
    assert named_paths("see `docs/manifest.md` and [x](bench/README.md), not `dist/x.whl`") == [
        "docs/manifest.md",
        "bench/README.md",
    ]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_named_path_exists(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    base = (ROOT / document).parent
    missing = [p for p in named_paths(text) if not (ROOT / p).exists() and not (base / p).exists()]
    assert not missing, f"{document} names paths that do not exist: {missing}"


def test_no_tracked_file_cites_the_notes_outside_the_repository() -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "*.py", "*.md"], cwd=ROOT, capture_output=True, check=True)
    this = Path(__file__).resolve().relative_to(ROOT).as_posix()  # it names the rule
    files = [name for name in listed.stdout.decode().split("\0") if name and name != this]
    assert "README.md" in files and "runtime/dglu/torch/op.py" in files
    citing = [name for name in files if "shared/notes" in (ROOT / name).read_text(encoding="utf-8")]
    assert not citing, f"these cite shared/notes, which is outside the repository: {citing}"
