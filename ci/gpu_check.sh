#!/usr/bin/env bash
# The whole GPU check in one call, on the GPU machine (no network there; torch and
# cuda-bindings already installed):
#   1. install the dglu wheel with --no-deps into a temporary target directory;
#   2. check that `dglu` imports from there, runs one real call, and never imports cutlass;
#   3. run the GPU tests against the installed wheel (DGLU_USE_INSTALLED=1) and its variants
#      only (DGLU_CUBIN_PATH unset, an empty user variant directory): on Hopper the sm90
#      matrix, on Blackwell (10.0, 10.3) tests/gpu/test_sm100_gpu.py (BF16) and
#      tests/gpu/test_sm100_blockscaled_gpu.py (MXFP8, NVFP4), which also compare with
#      cudnn.grouped_gemm_dglu_wrapper_sm100 where cuDNN FE is importable;
#   4. print ONE summary line: GPU CHECK: N passed, M failed, S skipped (device: ..., wheel: ...)
# pytest's log and junit XML (and the summary) go to $OUT/ when $OUT is set. Without pytest
# on the machine, it is installed from the wheelhouse $DGLU_WHEELHOUSE (default .whl/).
# Exit status 0 only when tests ran and none failed or errored.
#
# Usage: bash ci/gpu_check.sh [path/to/dglu-*.whl] [pytest args...]
#        (default wheel: the one dist/dglu-*.whl)
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
logs=${OUT:-$(mktemp -d)}
mkdir -p "$logs"

summary() {  # $1: counts, $2: device, $3: wheel
    local line="GPU CHECK: $1 (device: $2, wheel: $3)"
    echo "$line" | tee "$logs/gpu-summary.txt"
}

source ci/wheel.sh
if ! wheel=$(dglu_wheel "${1:-}"); then
    summary "0 passed, 0 failed, 0 skipped, setup error: no single wheel in dist/" "unknown" "none"
    exit 2
fi
[[ ${1:-} == *.whl ]] && shift

target=$(mktemp -d)/site-packages
trap 'rm -rf "$(dirname "$target")"' EXIT
if ! install_dglu_wheel "$wheel" "$target" > "$logs/gpu-install.log" 2>&1; then
    cat "$logs/gpu-install.log" >&2
    summary "0 passed, 0 failed, 0 skipped, setup error: pip could not install the wheel" "unknown" "$wheel"
    exit 2
fi
# pytest, if this machine lacks it, from a wheelhouse carried along (pip download pytest -d .whl)
wheelhouse=${DGLU_WHEELHOUSE:-.whl}
if ! "$python" -c "import pytest" 2> /dev/null; then
    if ! "$python" -m pip install --quiet --no-index --find-links "$wheelhouse" --target "$target" \
            pytest >> "$logs/gpu-install.log" 2>&1; then
        cat "$logs/gpu-install.log" >&2
        summary "0 passed, 0 failed, 0 skipped, setup error: no pytest (none in $wheelhouse/)" \
            "unknown" "$wheel"
        exit 2
    fi
fi
export DGLU_USE_INSTALLED=1 PYTHONPATH="$target"
# only the wheel's variants: no DGLU_CUBIN_PATH, an empty user variant directory
unset DGLU_CUBIN_PATH
export XDG_CACHE_HOME="$(dirname "$target")/cache"

# One real call through the installed package; prints the device name on its last line.
if ! "$python" - "$target" > "$logs/gpu-smoke.log" 2>&1 <<'PY'
import os
import subprocess
import sys

import dglu

target = os.path.realpath(sys.argv[1])
location = os.path.realpath(dglu.__file__)
assert location.startswith(target + os.sep), f"dglu imported from {location}, not from {target}"
subprocess.run([sys.executable, "-m", "dglu"], check=True)

import torch

# one expert: a count every architecture's shipped variants serve (Blackwell's compile L in)
m, n, k, l = 512, 64, 64, 1
a = torch.randn(m, k, 1, device="cuda").bfloat16()
b = torch.randn(l, n, k, device="cuda").bfloat16().permute(1, 2, 0)
c = torch.randn(m, 2 * n, 1, device="cuda").bfloat16()
wrapper = dglu.grouped_gemm_dglu_wrapper_sm100 if torch.cuda.get_device_capability()[0] == 10 else dglu.grouped_gemm_dglu_wrapper_sm90
out = wrapper(
    a_tensor=a, c_tensor=c, b_tensor=b,
    padded_offsets=torch.tensor([512], dtype=torch.int32, device="cuda"),
    alpha_tensor=torch.ones(l, device="cuda"), beta_tensor=torch.ones(l, device="cuda"),
    prob_tensor=torch.ones(m, 1, 1, device="cuda"), dprob_tensor=torch.zeros(m, 1, 1, device="cuda"),
    generate_dbias=True,
)
torch.cuda.synchronize()
assert torch.isfinite(out["d_row_tensor"].float()).all(), "smoke call wrote non-finite values"
imported = sorted(name for name in sys.modules if name.split(".")[0] == "cutlass")
assert not imported, f"the runtime imported CuTe DSL modules: {imported}"
print(f"dglu from {location}; smoke call ok; cutlass never imported")
print(torch.cuda.get_device_name())
PY
then
    cat "$logs/gpu-smoke.log" >&2
    device=$("$python" -c "import torch; print(torch.cuda.get_device_name())" 2>/dev/null || echo unknown)
    summary "0 passed, 1 failed, 0 skipped, setup error: installed dglu failed its smoke call" "$device" "$wheel"
    exit 1
fi
cat "$logs/gpu-smoke.log"
device=$(tail -n 1 "$logs/gpu-smoke.log")

"$python" -m pytest tests/gpu -rs -p no:cacheprovider --junitxml="$logs/gpu-junit.xml" "$@" \
    2>&1 | tee "$logs/gpu-pytest.log"
status=${PIPESTATUS[0]}

counts=$("$python" - "$logs/gpu-junit.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as exc:
    print(f"0 passed, 0 failed, 0 skipped, no pytest report ({exc})")
    raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
total = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
failed = total["failures"] + total["errors"]
passed = total["tests"] - failed - total["skipped"]
print(f"{passed} passed, {failed} failed, {total['skipped']} skipped")
PY
)
summary "$counts" "$device" "$(basename "$wheel")"
passed=${counts%% passed*}
if [ "$status" -ne 0 ] || [ "${passed:-0}" -eq 0 ]; then
    exit 1
fi
