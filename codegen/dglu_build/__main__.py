"""``python3 -m dglu_build``: the same CLI as ``dglu-build`` (see dglu_build.cli)."""

from dglu_build.cli import main

if __name__ == "__main__":
    main(prog_name="dglu-build")
