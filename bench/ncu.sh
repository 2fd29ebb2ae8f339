#!/usr/bin/env bash
# Nsight Compute profiles of one shape on the GPU machine: (a) dglu's fused main kernel and
# (b) torch._grouped_mm's GEMM kernel (or the two candidates NCU_CANDIDATES names), a few
# launches each, clocks left as they are.
#
# Usage: bash bench/ncu.sh [dglu-*.whl] SHAPE [OUTDIR]
#        bash bench/ncu.sh --help
#   wheel:  installed with --no-deps into a temporary target directory on PYTHONPATH, as
#           bench/run.sh does (default: the one dist/dglu-*.whl);
#   SHAPE:  a name of bench/shapes.py (python -m bench --help lists them);
#   OUTDIR: where the results go (default: $OUT if set, else bench/out/ncu).
# Per candidate OUTDIR gets SHAPE-CANDIDATE.ncu-rep (open it in
# Nsight Compute), SHAPE-CANDIDATE.raw.csv (ncu's raw page, every metric collected) and
# SHAPE-CANDIDATE.log (ncu's and the target's output); then SHAPE-summary.csv and
# SHAPE-summary.txt (bench.ncu_summary: per launch duration, tensor pipe %, wgmma count,
# DRAM throughput % and bytes, L2 hit rate, LSU shared-memory %, issue slots busy,
# registers/thread, achieved occupancy, top warp stall reasons); the text is printed.
#
# How the kernels are picked: the profiled process (python -m bench.ncu_target) builds the
# shape's inputs with the harness's own builders, then calls one candidate WARMUP + COUNT
# times and runs nothing else. ncu matches kernels by demangled name (--kernel-name regex),
# skips the first WARMUP matches (--launch-skip) and profiles the next COUNT
# (--launch-count):
#   fused:        dglu_<variant>_main_<index>, the manifest's symbol of a variant's main
#                 kernel (docs/manifest.md, KERNEL); its finisher kernels do not match;
#   grouped_gemm: the CUTLASS kernel behind torch._grouped_mm (cutlass::device_kernel<...>);
#                 its argument-preparing kernel does not match;
#   deterministic, mxfp8: as fused (the MXFP8 op's main kernel decodes and quantizes too).
#
# Environment: NCU_CANDIDATES (two candidates of bench.ncu_target, the first profiled and
# summarized first, default "fused grouped_gemm"; e.g. "mxfp8 fused": the MXFP8 op beside
# the BF16 one), NCU (the ncu binary, default ncu), PYTHON (default python3), NCU_WARMUP
# (default 2), NCU_COUNT (default 3), NCU_FUSED_KERNEL and NCU_GEMM_KERNEL (the regexes
# above, to override), NCU_METRICS (the comma-separated --metrics list; default: the
# figures of bench.ncu_summary, metric names of ncu on sm90: drop one this ncu lacks),
# NCU_EXTRA (more ncu arguments, e.g. "--set full").
# Exit status: 0 done; 1 ncu or the summary failed; 2 bad arguments or the wheel did not
# install.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    usage
    exit 0
fi

python=${PYTHON:-python3}
ncu=${NCU:-ncu}
warmup=${NCU_WARMUP:-2}
count=${NCU_COUNT:-3}
fused_kernel=${NCU_FUSED_KERNEL:-'^dglu_.*_main_[0-9]+$'}
gemm_kernel=${NCU_GEMM_KERNEL:-'cutlass::device_kernel'}
read -r -a candidates <<< "${NCU_CANDIDATES:-fused grouped_gemm}"
section_args=()
for section in SpeedOfLight MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables \
    ComputeWorkloadAnalysis WarpStateStats SchedulerStats LaunchStats Occupancy; do
    section_args+=(--section "$section")
done

refuse() {
    echo "bench/ncu.sh: $*" >&2
    exit 2
}

source ci/wheel.sh
wheel=$(dglu_wheel "${1:-}") || exit 2
[[ ${1:-} == *.whl ]] && shift
shape=${1:-}
out=${2:-${OUT:-bench/out/ncu}}
[[ -n $shape ]] || refuse "SHAPE: missing; usage: bash bench/ncu.sh [dglu-*.whl] SHAPE [OUTDIR]"
shapes=$("$python" -c 'from bench.shapes import SHAPE_NAMES; print(" ".join(SHAPE_NAMES))')
[[ " $shapes " == *" $shape "* ]] || refuse "SHAPE: got $shape; expected one of: $shapes"
[[ $warmup =~ ^[0-9]+$ ]] || refuse "NCU_WARMUP: got $warmup; need a count (0 or more)"
[[ $count =~ ^[1-9][0-9]*$ ]] || refuse "NCU_COUNT: got $count; need a positive count"
known=$("$python" -c 'from bench.candidates import CANDIDATES; print(" ".join(CANDIDATES))')
[[ ${#candidates[@]} -eq 2 ]] || refuse "NCU_CANDIDATES: got '${candidates[*]}'; need two of: $known"
for candidate in "${candidates[@]}"; do
    [[ " $known " == *" $candidate "* ]] || refuse "NCU_CANDIDATES: got $candidate; expected one of: $known"
done
command -v "$ncu" > /dev/null || refuse "NCU: $ncu is not a command; set NCU to the ncu binary"
mkdir -p "$out" || exit 2

install_on_pythonpath "$wheel" bench/ncu.sh
# bench.ncu_summary's metric list, so that ncu collects each figure the summary reports.
default_metrics=$("$python" -c 'from bench.ncu_summary import METRICS; print(",".join(METRICS))')
metrics=${NCU_METRICS:-$default_metrics}

# profile CANDIDATE REGEX: one ncu run of bench.ncu_target, then its raw page as CSV.
profile() {
    local candidate=$1 regex=$2 report="$out/$shape-$1"
    echo "bench/ncu.sh: $shape $candidate: launches $((warmup + 1))-$((warmup + count)) of" \
        "kernels matching $regex" >&2
    # shellcheck disable=SC2086  # NCU_EXTRA is a list of arguments
    if ! "$ncu" --clock-control none --kernel-name-base demangled --kernel-name "regex:$regex" \
        --launch-skip "$warmup" --launch-count "$count" \
        "${section_args[@]}" --metrics "$metrics" ${NCU_EXTRA:-} \
        --force-overwrite --export "$report" \
        "$python" -m bench.ncu_target --shape "$shape" --candidate "$candidate" \
        --calls $((warmup + count)) > "$report.log" 2>&1; then
        echo "bench/ncu.sh: ncu failed on $candidate; the end of $report.log:" >&2
        tail -n 30 "$report.log" >&2
        return 1
    fi
    "$ncu" --import "$report.ncu-rep" --page raw --csv --print-units base > "$report.raw.csv"
}

raw=()
for candidate in "${candidates[@]}"; do
    regex=$fused_kernel
    [[ $candidate == grouped_gemm ]] && regex=$gemm_kernel
    profile "$candidate" "$regex" || exit 1
    raw+=("$out/$shape-$candidate.raw.csv")
done
"$python" -m bench.ncu_summary "${raw[@]}" --out "$out/$shape-summary" || exit 1
