#!/usr/bin/env bash
# compute-sanitizer over one small call of every kernel class the wheel ships, on the GPU
# machine (beside ci/gpu_check.sh; docs/sanitizer.md explains the findings):
#   1. install the dglu wheel with --no-deps into a temporary target directory;
#   2. run ci/sanitize_cases.py run (one checked call per kernel class, chosen from the
#      installed manifest) under memcheck, racecheck, synccheck and initcheck, the four
#      tools in parallel, each log in $OUT/sanitize-<tool>.log;
#   3. print ONE summary line:
#      SANITIZE: memcheck 0 errors, racecheck P hazard pairs, H hazards (A pairs accepted,
#      0 new), synccheck 0 errors, initcheck 0 errors (device: ..., wheel: ...)
# Exit status 0 only when every tool ran, the calls passed their checks, memcheck,
# synccheck and initcheck found nothing, and every racecheck hazard pair is on the
# accepted list (ci/racecheck_accepted.txt; a new pair fails).
#
# --report-api-errors no: cuda-bindings resolves driver entry points at start-up with
# cuGetProcAddress, and probes for some the driver does not have; each failed probe is
# an "API error" to compute-sanitizer (34 of them, none made by dglu). dglu checks every
# driver call it makes and raises on failure, so the calls' own exit status covers them.
# racecheck and synccheck only instrument dglu's kernels (--kernel-name kns=dglu_):
# shared-memory hazards are per kernel, and torch's kernels are not ours to check.
#
# Usage: bash ci/sanitize.sh [path/to/dglu-*.whl] [sanitize_cases.py run args, e.g. --all]
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
sanitizer=${COMPUTE_SANITIZER:-compute-sanitizer}
logs=${OUT:-$(mktemp -d)}
mkdir -p "$logs"

source ci/wheel.sh
if ! wheel=$(dglu_wheel "${1:-}"); then
    echo "SANITIZE: setup error: no single wheel in dist/ (device: unknown, wheel: none)"
    exit 2
fi
[[ ${1:-} == *.whl ]] && shift
if ! command -v "$sanitizer" > /dev/null; then
    echo "SANITIZE: setup error: $sanitizer not found (device: unknown, wheel: $(basename "$wheel"))"
    exit 2
fi

target=$(mktemp -d)/site-packages
trap 'rm -rf "$(dirname "$target")"' EXIT
if ! install_dglu_wheel "$wheel" "$target" > "$logs/sanitize-install.log" 2>&1; then
    cat "$logs/sanitize-install.log" >&2
    echo "SANITIZE: setup error: pip could not install the wheel (device: unknown, wheel: $(basename "$wheel"))"
    exit 2
fi
export DGLU_USE_INSTALLED=1 PYTHONPATH="$target" PYTHONUNBUFFERED=1
unset DGLU_CUBIN_PATH
export XDG_CACHE_HOME="$(dirname "$target")/cache"
device=$("$python" -c "import torch; print(torch.cuda.get_device_name())" 2> /dev/null || echo unknown)

run_tool() {  # $1: tool, then its own options
    local tool=$1
    shift
    "$sanitizer" --tool "$tool" --report-api-errors no "$@" \
        "$python" ci/sanitize_cases.py run "${cases_args[@]}" > "$logs/sanitize-$tool.log" 2>&1
    echo $? > "$logs/sanitize-$tool.rc"
}

cases_args=("$@")
"$python" ci/sanitize_cases.py list "${cases_args[@]}" > "$logs/sanitize-cases.txt"
echo "sanitize: $(wc -l < "$logs/sanitize-cases.txt") cases: $(paste -sd ' ' "$logs/sanitize-cases.txt")"
start=$SECONDS
run_tool memcheck --print-limit 200 &
run_tool racecheck --kernel-name kns=dglu_ --print-limit 100000 &
run_tool synccheck --kernel-name kns=dglu_ --print-limit 200 &
run_tool initcheck --print-limit 200 &
wait
echo "sanitize: the four tools took $((SECONDS - start)) s"

"$python" ci/sanitize_report.py "$logs" ci/racecheck_accepted.txt "$device" "$(basename "$wheel")" \
    | tee "$logs/sanitize-summary.txt"
exit "${PIPESTATUS[0]}"
