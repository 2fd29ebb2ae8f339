"""``python -m codegen``: the same CLI as ``dglu-build`` (see codegen.cli)."""

from codegen.cli import main

if __name__ == "__main__":
    main(prog_name="dglu-build")
