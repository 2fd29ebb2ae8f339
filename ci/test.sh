#!/usr/bin/env bash
# Run the test suite in its own venv (.venv-test), installing what it needs:
# the wheel's run-time dependencies, its `test` and `build` extras and its
# build requirements, all read from pyproject.toml. No GPU needed: tests
# marked `gpu` skip (with the reason) where there is none.
# Usage: bash ci/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=.venv-test
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" - <<'PY' > "$venv/requirements.txt"
import tomllib

with open("pyproject.toml", "rb") as file:
    config = tomllib.load(file)
project = config["project"]
extras = project["optional-dependencies"]
print("\n".join(project["dependencies"] + extras["test"] + extras["build"] + config["build-system"]["requires"]))
PY
"$venv/bin/python" -m pip install --quiet -r "$venv/requirements.txt"

status=0
"$venv/bin/python" -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "ci/test.sh: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit "$status"
