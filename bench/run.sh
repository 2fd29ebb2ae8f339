#!/usr/bin/env bash
# The whole benchmark in one call on the GPU machine (no network there; torch, triton,
# matplotlib and cuda-bindings already installed):
#   1. install the dglu wheel with --no-deps into a temporary target directory;
#   2. run `python -m bench` against it: device timings of the fused op beside the PyTorch
#      baselines on every shape, host-side costs, bench.json + bench_ratios.png +
#      bench_table.txt + host_profile.txt in $OUT (else bench/out/);
#   3. print the table and, last, ONE summary line starting with "BENCH:".
# The commit under test comes from $DGLU_COMMIT (this copy of the tree may lack .git).
# Exit status: python -m bench's (0 all measured and correct, 1 a measurement failed or
# disagreed, 2 bad arguments or no GPU), or 2 when the wheel cannot be installed.
#
# Usage: DGLU_COMMIT=$(git rev-parse --short HEAD) bash bench/run.sh [dglu-*.whl] [bench args...]
#        (default wheel: the one dist/dglu-*.whl; bench args: python -m bench --help)
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

source ci/wheel.sh
wheel=$(dglu_wheel "${1:-}") || exit 2
[[ ${1:-} == *.whl ]] && shift

install_on_pythonpath "$wheel" bench/run.sh
# the results are written with the build side's atomic write (dglu_build.atomic_write,
# standard library only): the clone's codegen/ goes on the path, after the wheel
export PYTHONPATH="$PYTHONPATH:$PWD/codegen"
export DGLU_WHEEL="$wheel"
"$python" -m bench "$@"
