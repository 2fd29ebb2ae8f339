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
