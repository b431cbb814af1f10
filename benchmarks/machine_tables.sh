#!/usr/bin/env bash
# docs/speed.md's table for the machine this runs on, and the README's row for its kind: mars-bench at batch 1 (18
# held-out prompts, 3 rounds) and at batches 4 and 8 (16 prompts, 2 rounds), the embedded model in the dtype load()
# picks here, 64 new tokens, B = 4, drafts >= 0.3; transformers' generate and prompt lookup, our one-token and
# verified decoding (on the compiled forward too where our rows kernel serves: bf16 with AMX, AVX512-BF16 or AVX2), and
# llama.cpp's one-token and verified decoding where llama-cpp-python is installed: of the wheel's own Q4_1 GGUF as
# shipped (the peer users run) and of the same weights (on AVX2 also Q8_0). Each JSON is stamped with
# this checkout's commit and today's date, then the tables are rendered. Run it on a quiet machine (nothing else on
# the cores): about 25 minutes on 2 CPU cores.
#   bash benchmarks/machine_tables.sh [OUT_DIR]        # default: assets/records/speed
#   DRY=1 bash benchmarks/machine_tables.sh             # print the commands, run nothing
# The files are named <kind>_<dtype>_b1.json and <kind>_<dtype>_batches.json (kind: amx, avx512_bf16, avx512, avx2),
# so a new run of a kind replaces its records; STEM=avx2_zen1_bf16 names them otherwise (a kind's other core keeps
# its own). The tables file every record by the machine it names (kind, core, dtype), not by its name.
set -eu
OUT=${1:-assets/records/speed}
PY=${PYTHON:-python}
# telling load()'s dtype builds the rows kernel: in a folder of its own, so the run's start finds MARS_CACHE as it was
PROBE=$(mktemp -d)
trap 'rm -rf "$PROBE"' EXIT
read -r KIND DTYPE < <(MARS_CACHE=$PROBE $PY -c "
from mars_core.evaluation.tables._records import dtype, kind
from mars_core.load import resolve_dtype
from mars_core.machine import machine_info
print(kind(machine_info()), dtype(str(resolve_dtype('auto')).removeprefix('torch.')))") || true
[ -n "$KIND" ] && [ -n "$DTYPE" ] || { echo "machine_tables.sh: could not tell this machine's kind" >&2; exit 1; }
METHODS=hf_generate,hf_prompt_lookup,ar,mars_verified
BATCH_METHODS=hf_generate,ar,mars_verified
if [ "$DTYPE" = bf16 ]; then  # bf16 on a CPU: the rows kernel serves (load() picks fp32 elsewhere)
  METHODS=$METHODS,ar_compiled,mars_verified_compiled
  BATCH_METHODS=hf_generate,ar_compiled,mars_verified_compiled
fi
LLAMACPP=""
if $PY -c "import llama_cpp" 2>/dev/null; then
  case "$KIND/$DTYPE" in  # the shipped Q4_1 file, then the served model's weights (on AVX2 also Q8_0)
    avx2/*) WEIGHTS=q4_1_shipped,bf16,q8_0 ;;
    */bf16) WEIGHTS=q4_1_shipped,bf16 ;;
    *) WEIGHTS=q4_1_shipped,f32,q8_0 ;;
  esac
  WEIGHTS=${LLAMACPP_WEIGHTS:-$WEIGHTS}
  METHODS=$METHODS,llamacpp_ar,llamacpp_verified
  LLAMACPP="--llamacpp-weights $WEIGHTS"
fi
run() { if [ -n "${DRY:-}" ]; then echo "$*"; else "$@"; fi; }
bench() { run $PY -m mars_core.evaluation.bench --block-sizes 4 --verified-thresholds 0.3 --max-new-tokens 64 "$@"; }
STEM=${STEM:-${KIND}_${DTYPE}}
mkdir -p "$OUT"
bench --methods "$METHODS" $LLAMACPP --batch-sizes 1 --limit 18 --repeats 3 --json "$OUT/${STEM}_b1.json"
bench --methods "$BATCH_METHODS" --batch-sizes 4,8 --limit 16 --repeats 2 --json "$OUT/${STEM}_batches.json"
run $PY -m mars_core.evaluation.tables --stamp "$OUT/${STEM}_b1.json" "$OUT/${STEM}_batches.json"
run $PY -m mars_core.evaluation.tables
