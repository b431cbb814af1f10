#!/usr/bin/env bash
# The speed tables of docs/speed.md for the machine this runs on: verified mode against transformers' generate and
# prompt lookup, batch 1 (held-out and never-trained) and batches 4, 8 and 16, in fp32 and in bf16, the embedded
# model, 64 new tokens. Run it on a quiet machine (nothing else on the cores); about 45 min on 2 CPU cores.
#   bash benchmarks/machine_tables.sh [OUT_DIR] [DTYPES]        # default: runs/machine_tables "fp32 bf16"
# Each JSON records the machine (CPU, AMX / AVX512-BF16 / AVX-512 / AVX2, threads, torch, dtype) and the cost curve
# verified mode sized its trees by; `--layout fixed` is the same decoder with the fixed rules, for comparison.
set -eu
OUT=${1:-runs/machine_tables}
DTYPES=${2:-fp32 bf16}
mkdir -p "$OUT"
bench() { python -m mars_core.bench --block-sizes 4 --verified-thresholds 0.3 --max-new-tokens 64 "$@"; }
for dtype in $DTYPES; do
  bench --dtype "$dtype" --methods hf_generate,hf_prompt_lookup,mars_verified --batch-sizes 1 --limit 18 \
    --repeats 3 --json "$OUT/b1_heldout_$dtype.json"
  bench --dtype "$dtype" --methods hf_generate,mars_verified --batch-sizes 4,8,16 --limit 16 --repeats 2 \
    --json "$OUT/batches_$dtype.json"
  bench --dtype "$dtype" --methods hf_generate,hf_prompt_lookup,mars_verified --batch-sizes 1 --limit 18 \
    --split never_trained --repeats 3 --json "$OUT/b1_never_trained_$dtype.json"
  bench --dtype "$dtype" --methods hf_generate,mars_verified --batch-sizes 1 --limit 18 --layout fixed \
    --repeats 3 --json "$OUT/b1_heldout_fixed_$dtype.json"
done
