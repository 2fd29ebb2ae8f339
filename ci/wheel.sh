# Sourced by ci/gpu_check.sh and bench/run.sh: which dglu wheel to test, and installing it
# where nothing else is (no network on the GPU machine: --no-index, --no-deps).

# dglu_wheel [ARG]: ARG when it names a .whl, else the one dist/dglu-*.whl; fails saying what it found.
dglu_wheel() {
    if [[ ${1:-} == *.whl ]]; then
        echo "$1"
        return
    fi
    local wheels
    shopt -s nullglob
    wheels=(dist/dglu-*.whl)
    shopt -u nullglob
    if [ ${#wheels[@]} -ne 1 ]; then
        echo "expected exactly one dist/dglu-*.whl, found ${#wheels[@]}; pass the wheel's path" >&2
        return 1
    fi
    echo "${wheels[0]}"
}

# install_dglu_wheel WHEEL TARGET: install WHEEL alone into the directory TARGET.
install_dglu_wheel() {
    "${python:-python3}" -m pip install --quiet --no-deps --no-index --target "$2" "$1"
}

# install_on_pythonpath WHEEL SCRIPT: install WHEEL into a fresh temporary directory (removed
# when the calling script exits) and put it on PYTHONPATH, before what the caller had there
# (optional peers such as quack for bench.quack); if pip fails, print its log under
# SCRIPT's name and exit 2.
install_on_pythonpath() {
    local site log
    site=$(mktemp -d)/site-packages
    # shellcheck disable=SC2064  # the directory is known now
    trap "rm -rf '$(dirname "$site")'" EXIT
    if ! log=$(install_dglu_wheel "$1" "$site" 2>&1); then
        echo "$2: pip could not install $1:" >&2
        echo "$log" >&2
        exit 2
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"  # after the wheel: optional peers (bench.quack)
}
