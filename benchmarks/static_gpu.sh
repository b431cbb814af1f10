#!/usr/bin/env bash
# The static-shape decoder on a GPU (issue 50's floors), in one run sized for a short GPU slot: each step is capped
# (STEP_S seconds, default 70), writes its JSON as it ends, and a failed or cut step does not stop the next.
#   bash benchmarks/static_gpu.sh "$OUT"              # on the GPU machine (bf16, what load() picks there)
#   DRY=1 bash benchmarks/static_gpu.sh /tmp/dry       # first, on a CPU: tiny sizes, every step and file checked
# The embedded model must load there: benchmarks/gpu_model.sh sends its GGUF in parts beside the tree, then
# `eval "$(bash benchmarks/gpu_model.sh join)"` in this call puts it (and the gguf reader) on PYTHONPATH. MARS_BENCH names the bench command (default mars-bench; "python -m mars_core.evaluation.bench"
# without the console script), PYTHON the interpreter (default python).
set -uo pipefail
out=${1:-runs/static_gpu}
bench=${MARS_BENCH:-mars-bench}
py=${PYTHON:-python}
mkdir -p "$out"
if [[ -n "${DRY:-}" ]]; then limit=2 tokens=8 repeats=1 wide=2 wider=3 cap=${STEP_S:-300}
else limit=18 tokens=64 repeats=2 wide=16 wider=64 cap=${STEP_S:-70}; fi
step() { echo "== $*"; timeout "$cap" "$@"; rc=$?; [[ $rc == 0 ]] || echo "== failed or cut ($rc): $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: a dry run"

# 1. identity where it is claimed: the graphs against eager forwards (CUDA only), the static decoder on the embedded
#    model in each dtype (alone and batched), the width check of every width the decoders feed
step "$py" -m pytest -rs -p no:cacheprovider tests/runtime/test_graphs.py tests/runtime/test_slots.py \
    "tests/test_default_model.py::test_static_shapes_decode_one_token_decodings_answer_in_each_dtype"
common=(--block-sizes 4 --thresholds 0.9 --verified-thresholds 0.3 --max-new-tokens "$tokens" --limit "$limit")
# 2. batch 1, held-out prompts: every method, static and dynamic (the floors: one-token >= 400 tok/s, verified >= 2x
#    one-token and >= 700 tok/s, tau 0.9 >= 1.6x one-token, 18 x 64 x every method in under a minute)
step $bench --methods hf_generate,ar,ar_static,mars_verified,mars_verified_static,mars_sliding_static \
    --batch-sizes 1 "${common[@]}" --repeats "$repeats" --json "$out/b1.json"
# 3. batch 1, never-trained prompts: verified == one-token where nothing was trained
step $bench --split never_trained --methods ar_static,mars_verified_static --batch-sizes 1 "${common[@]}" \
    --repeats 1 --json "$out/b1_never_trained.json"
# 4. batches 16 and 64 (the floors: block at tau 0.9 and verified >= 1.5x generate at the same batch)
step $bench --methods hf_generate,ar_static,mars_block,mars_verified_static --batch-sizes "$wide" "${common[@]}" \
    --repeats 1 --json "$out/b$wide.json"
step $bench --methods hf_generate,mars_block,mars_verified_static --batch-sizes "$wider" "${common[@]}" \
    --repeats 1 --json "$out/b$wider.json"
# 5. where the time goes: one verified decode under torch.profiler, its top kernels and host ops
step "$py" benchmarks/static_profile.py --max-new-tokens "$tokens" --out "$out/profile.txt"
ls -l "$out"
