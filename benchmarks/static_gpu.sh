#!/usr/bin/env bash
# The static-shape decoder on a GPU (issue 50's floors), in one run sized for a short GPU slot: each step is capped
# (a cap per step; STEP_S in a dry run), writes its JSON as it ends, and a failed or cut step does not stop the next.
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
if [[ -n "${DRY:-}" ]]; then limit=2 tokens=8 few=2 wide=2 wider=3 cap=${STEP_S:-300}
else limit=18 tokens=64 few=6 wide=16 wider=64 cap=${STEP_S:-45}; fi
# step CAP_SECONDS CMD...: each capped, so one slow step cannot eat the slot (a cut bench writes no JSON)
step() { local t=$1; shift; [[ -n "${DRY:-}" ]] && t=$cap; echo "== $* (cap ${t} s)"; timeout "$t" "$@"; rc=$?
         [[ $rc == 0 ]] || echo "== failed or cut ($rc): $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: a dry run"
"$py" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

# 1. identity where it is claimed: the graphs against eager forwards (CUDA only), the static decoder on the embedded
#    model in each dtype (alone and batched), the width check of every width the decoders feed
step 60 "$py" -m pytest -rs -p no:cacheprovider tests/runtime/test_graphs.py tests/runtime/test_slots.py \
    "tests/test_default_model.py::test_static_shapes_decode_one_token_decodings_answer_in_each_dtype"
common=(--block-sizes 4 --thresholds 0.9 --verified-thresholds 0.3 --max-new-tokens "$tokens")
# 2. batch 1, held-out prompts, the static path (the floors: one-token >= 400 tok/s, verified >= 2x one-token and
#    >= 700 tok/s, tau 0.9 >= 1.6x one-token, 18 x 64 x every method in under a minute)
step 90 $bench --methods hf_generate,ar_static,mars_verified_static,mars_sliding_static --batch-sizes 1 \
    "${common[@]}" --limit "$limit" --repeats 1 --json "$out/b1.json"
# 3. the dynamic path beside it, on fewer prompts (which becomes CUDA's default)
step 45 $bench --methods ar,mars_verified,ar_static,mars_verified_static --batch-sizes 1 "${common[@]}" \
    --limit "$few" --repeats 1 --json "$out/b1_dynamic.json"
# 4. batch 1, never-trained prompts: verified == one-token where nothing was trained
step 45 $bench --split never_trained --methods ar_static,mars_verified_static --batch-sizes 1 "${common[@]}" \
    --limit "$limit" --repeats 1 --json "$out/b1_never_trained.json"
# 5. batches 16 and 64 (the floors: block at tau 0.9 and verified >= 1.5x generate at the same batch)
step 45 $bench --methods hf_generate,mars_block,mars_verified_static --batch-sizes "$wide" "${common[@]}" \
    --limit "$wide" --repeats 1 --json "$out/b$wide.json"
step 45 $bench --methods hf_generate,mars_block,mars_verified_static --batch-sizes "$wider" "${common[@]}" \
    --limit "$wider" --repeats 1 --json "$out/b$wider.json"
# 6. where the time goes: one verified decode under torch.profiler, its top kernels and host ops
step 45 "$py" benchmarks/static_profile.py --limit 2 --max-new-tokens 32 --out "$out/profile.txt"
# 7. transformers' own fast path (its static cache and a compiled forward, CUDA graphs): the peer (its compile is
#    slow: last, so a cut slot loses it first)
step 100 $bench --methods hf_compiled,mars_verified_static --batch-sizes 1 "${common[@]}" --limit "$few" \
    --repeats 2 --json "$out/b1_hf_compiled.json"
ls -l "$out"
