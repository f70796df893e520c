#!/usr/bin/env bash
# seqgrad vs PyTorch, side by side: runs `seqgrad bench` and bench/torch_bench.py alternately, one
# workload at a time and for several rounds (the order flips every round), then prints the table
# (bench/compare.py). The decoding workloads (greedy_*, beam5_*) also run in onnxruntime (CPU
# provider, same threads; bench/ort_bench.py) on the same weights exported by `seqgrad export`,
# when the build has ONNX support and the Python below has onnxruntime; otherwise that column is
# skipped and the reason printed. PyTorch runs twice per workload:
# with its defaults, and with OMP_WAIT_POLICY=passive, which is much faster for it on a loaded
# machine; ratios are taken against the faster of the two. --quick (the CI smoke: every workload
# once on every side, no figures kept) runs PyTorch with its defaults only.
#
#   bench/run.sh [--quick] [--rounds N] [--threads N] [--repeats N] [WORKLOAD ...]
#
# Environment: SEQGRAD (the seqgrad binary; default: build-perf/tools/seqgrad, else
# build/tools/seqgrad), OUT (results folder; default bench/results/<date-time>), PYTHON (default:
# the project's .venv/bin/python3 from scripts/setup.sh --tests, else /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 threads=2 quick=() repeats=() passive=1
workloads=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=(--quick); rounds=1; passive=0 ;;
    --rounds) rounds="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    --repeats) repeats=(--repeats "$2"); shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) workloads+=("$1") ;;
  esac
  shift
done

seqgrad="${SEQGRAD:-}"
if [ -z "$seqgrad" ]; then
  for candidate in build-perf/tools/seqgrad build/tools/seqgrad; do
    if [ -x "$candidate" ]; then seqgrad="$candidate"; break; fi
  done
fi
[ -x "$seqgrad" ] || { echo "run.sh: no seqgrad binary (build it, or set SEQGRAD)" >&2; exit 2; }
python=${PYTHON:-/usr/bin/python3}
[ -n "${PYTHON:-}" ] || [ ! -x .venv/bin/python3 ] || python=.venv/bin/python3
# Both sides on the same OpenBLAS kernels: seqgrad picks SkylakeX on AVX-512 CPUs (core/blas.cpp),
# where OpenBLAS's own detection may pick another (Cooperlake on this project's AMD EPYC), so the
# kernels seqgrad reports are exported for PyTorch too unless OPENBLAS_CORETYPE is already set.
kernels_of_seqgrad() { "$seqgrad" info | sed -n 's/.*(kernels: \([A-Za-z0-9]*\).*/\1/p'; }
seqgrad_kernels=$(kernels_of_seqgrad)
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -n "$seqgrad_kernels" ]; then export OPENBLAS_CORETYPE="$seqgrad_kernels"; fi
out="${OUT:-bench/results/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out/data"
results="$out/results.jsonl"
: > "$results"

"$seqgrad" bench --export "$out/data" >/dev/null
# onnxruntime's side: the same initial weights, exported to ONNX (ort_bench.py's --onnx pattern
# onnx_{preset}); without onnxruntime or ONNX support the column is skipped, saying why.
export_onnx() {  # PRESET FOLDER [--bench-int8]
  "$seqgrad" export --bench-data "$out/data/$1" --out "$out/data/$2" "${@:3}" >/dev/null 2>"$out/export.err"
}
have_ort=0 ort_skipped=""
if ! $python -c 'import onnxruntime' 2>/dev/null; then
  ort_skipped="$python cannot import onnxruntime (scripts/setup.sh --tests installs it in .venv)"
elif export_onnx seed onnx_seed && export_onnx d2l onnx_d2l && export_onnx seed onnx_seed_int8 --bench-int8 &&
     export_onnx transformer onnx_transformer && export_onnx transformer onnx_transformer_int8 --bench-int8; then
  have_ort=1
else
  ort_skipped="seqgrad export failed: $(tail -n 1 "$out/export.err")"
fi
# every workload but the on-demand ones (listed as "NAME (on demand)")
if [ ${#workloads[@]} -eq 0 ]; then mapfile -t workloads < <("$seqgrad" bench --list | grep -v ' (on demand)$'); fi

# The OpenBLAS kernels PyTorch's BLAS (libblas.so.3) runs
torch_kernels() {
  $python -c 'import ctypes, torch; f = ctypes.CDLL("libblas.so.3").openblas_get_corename
f.restype = ctypes.c_char_p; print(f().decode())' 2>/dev/null || echo '?'
}
pytorch_kernels=$(torch_kernels)
{
  if [ "$seqgrad_kernels" != "$pytorch_kernels" ]; then
    echo "warning: seqgrad runs OpenBLAS's $seqgrad_kernels kernels and PyTorch $pytorch_kernels: the BLAS-bound rows compare kernels"
  fi
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores online; threads: $threads"
  echo "seqgrad: $("$seqgrad" info | tr '\n' ' ')"
  if ((have_ort)); then echo "onnxruntime: $($python -c 'import onnxruntime; print(onnxruntime.__version__)')"
  else echo "onnxruntime: column skipped: $ort_skipped"; fi
  echo "pytorch: $($python -c 'import torch; print(torch.__version__)') with BLAS $(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo '?'), kernels $pytorch_kernels (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
} | tee "$out/machine.txt"

run_seqgrad() { "$seqgrad" bench --threads "$threads" "${quick[@]}" "${repeats[@]}" --quiet --out-file "$results" "$1"; }
run_torch() { $python bench/torch_bench.py --data "$out/data" --threads "$threads" "${quick[@]}" "${repeats[@]}" \
                --json "$results" "$1" | tail -n +2; }
run_torch_passive() { OMP_WAIT_POLICY=passive $python bench/torch_bench.py --data "$out/data" --threads "$threads" \
                        "${quick[@]}" "${repeats[@]}" --json "$results" --label pytorch-passive "$1" | tail -n +2; }
run_ort() { $python bench/ort_bench.py --data "$out/data" --onnx "$out/data/onnx_{preset}" --threads "$threads" \
              "${quick[@]}" "${repeats[@]}" --json "$results" "$1" | tail -n +2; }

# side LABEL RUNNER WORKLOAD: prints "LABEL  result". A side that fails or prints nothing stops the
# run at once, named with its workload (its own error is just above), instead of leaving an empty
# row for compare.py to find at the end.
side() {
  local label=$1 runner=$2 workload=$3 line status
  line=$("$runner" "$workload") && status=0 || status=$?
  if ((status != 0)); then echo "run.sh: $label failed on $workload (exit status $status)" >&2; exit 1; fi
  if [ -z "$line" ]; then echo "run.sh: $label printed no result for $workload" >&2; exit 1; fi
  printf '%-15s %s\n' "$label" "$line"
}
side_ort() { case "$1" in greedy_*|beam5_*) ((have_ort)) && side onnxruntime run_ort "$1" ;; esac; return 0; }
side_passive() { ((passive)) && side pytorch-passive run_torch_passive "$1"; return 0; }

for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r/$rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  for w in "${workloads[@]}"; do
    if ((r % 2)); then
      side seqgrad run_seqgrad "$w"
      side pytorch run_torch "$w"
      side_passive "$w"
      side_ort "$w"
    else
      side_ort "$w"
      side_passive "$w"
      side pytorch run_torch "$w"
      side seqgrad run_seqgrad "$w"
    fi
  done
done
echo
$python bench/compare.py "$results" | tee "$out/table.md"
if ! ((have_ort)); then echo "onnxruntime column skipped: $ort_skipped" | tee -a "$out/table.md"; fi
