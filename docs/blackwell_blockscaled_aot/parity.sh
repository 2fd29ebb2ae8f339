#!/bin/bash
# Reference: ahead-of-time vs cuDNN FE's own compile() (device queries stubbed), one line per config.
# usage: PY=/path/to/venv/python bash parity.sh OUTDIR "recipe act flags..." ...
set -u
here=$(cd "$(dirname "$0")" && pwd); py=${PY:-python}; out=$1; shift
for cfg in "$@"; do
  read -r recipe act rest <<<"$cfg"
  flags=(); aot_only=(); jit_only=(); static=1
  for f in $rest; do case $f in
    static) static=0 ;;
    rubin) flags+=(--arch=sm_107a); aot_only+=(--kernel rubin) ;;  # cuDNN FE picks it on a (10, 7) device
    dd) flags+=(--discrete); aot_only+=(--kernel discrete_dswiglu); jit_only+=(--api discrete_dswiglu) ;;
    *) flags+=("--$f") ;;
  esac; done
  shapes=dynamic; [ $static = 0 ] && shapes=static
  aot=$($py "$here/compile_blockscaled.py" --recipe "$recipe" --act "$act" --shapes $shapes "${flags[@]}" "${aot_only[@]}" --out "$out/aot" 2>/dev/null | tail -1)
  jit=$(CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=$static $py "$here/jit_blockscaled.py" --recipe "$recipe" --act "$act" "${flags[@]}" "${jit_only[@]}" --out "$out/jit_$static" 2>/dev/null | tail -1)
  a=$(echo "$aot" | $py -c 'import json,sys; print(json.load(sys.stdin)["name"])')
  j=$(echo "$jit" | $py -c 'import json,sys; print(json.load(sys.stdin)["name"])')
  if cmp -s "$out/aot/$a.cubin" "$out/jit_$static/$j.cubin"; then r=IDENTICAL; else r=DIFFERENT; fi
  echo "$cfg | $r | aot $aot | jit $jit"
done
