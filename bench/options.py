"""The command-line options every timing entry point of the harness shares (python -m
bench, python -m bench.mxfp8): where results go, which shapes, the timing budget, the seed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .shapes import SHAPE_NAMES, select_shapes

DEFAULT_OUT = Path(__file__).resolve().parent / "out"


def positive(kind: type) -> Any:
    """An argparse type: a positive ``kind`` (int or float)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, need a positive {kind.__name__}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"got {text!r}, need a positive {kind.__name__}")
        return value

    return parse


def add_run_options(parser: argparse.ArgumentParser, results: str) -> None:
    """--out (the folder for ``results``), --shapes, --budget-ms and --seed."""
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ["OUT"]) if os.environ.get("OUT") else DEFAULT_OUT,
        help=f"folder for {results} (default: $OUT if set, else bench/out)",
    )
    parser.add_argument(
        "--shapes",
        type=lambda text: text.split(","),
        default=None,
        help=f"comma-separated subset of: {', '.join(SHAPE_NAMES)} (default: all)",
    )
    parser.add_argument(
        "--budget-ms",
        type=positive(float),
        default=300.0,
        help="timed device ms per candidate (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random inputs (default: %(default)s)"
    )


def parse_run_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, with --shapes resolved to Shapes and --out checked to be a
    folder (or absent); a bad value exits through ``parser.error``."""
    args = parser.parse_args(argv)
    try:
        args.shapes = select_shapes(args.shapes)
    except ValueError as exc:
        parser.error(str(exc))
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} exists and is not a folder; give a folder to write into")
    return args
