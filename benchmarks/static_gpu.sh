#!/usr/bin/env bash
# The static-shape decoder on a GPU (issue 76's floors), one run of at most 8 minutes sized for a short GPU slot, what
# matters most first: each step is capped (STEP_S in a dry run), writes its JSON into the output folder as it ends, and
# a failed or cut step does not stop the next.
#   bash benchmarks/static_gpu.sh "$OUT"              # on the GPU machine (bf16, what load() picks there)
#   DRY=1 bash benchmarks/static_gpu.sh /tmp/dry       # first, on a CPU: tiny sizes, every step and file checked
# The embedded model must load there: benchmarks/gpu_model.sh sends its GGUF in parts beside the tree, then
# `eval "$(bash benchmarks/gpu_model.sh join)"` in this call puts it (and the gguf reader) on PYTHONPATH. MARS_BENCH
# names the bench command (default mars-bench; "python -m mars_core.evaluation.bench" without the console script),
# PYTHON the interpreter (default python). On the GPU the CPU's rows kernel is not built (MARS_ROWS_KERNEL=0).
set -uo pipefail
out=${1:-${OUT:-runs/static_gpu}}
bench=${MARS_BENCH:-mars-bench}
py=${PYTHON:-python}
mkdir -p "$out"
began=$SECONDS budget=${BUDGET_S:-480}
if [[ -n "${DRY:-}" ]]; then budget=${BUDGET_S:-3600}; fi
if [[ -n "${DRY:-}" ]]; then limit=2 few=1 tokens=8 wide=2 wider=3 widths="1 2 4 32" contexts="16 48" cap=${STEP_S:-300}
else limit=18 few=6 tokens=64 wide=16 wider=64 widths="1 2 3 4 5 6 7 8 12 16 20 24 28 32" contexts="128 448" cap=0
     export MARS_ROWS_KERNEL=0; fi
# step CAP_SECONDS CMD...: each capped, so one slow step cannot eat the slot (a cut bench writes no JSON); a step
# that would start past the budget (BUDGET_S, 8 minutes; a dry run: an hour) is skipped, and the last one cut to it
step() { local t=$1; shift; [[ -n "${DRY:-}" ]] && t=$cap
         if (( SECONDS - began + 10 > budget )); then echo "== skipped (budget spent): $*"; return; fi
         (( SECONDS - began + t > budget )) && t=$(( budget - (SECONDS - began) ))
         echo "== $* (cap ${t} s, at $(( SECONDS - began )) s)"; timeout "$t" "$@"; rc=$?
         [[ $rc == 0 ]] || echo "== failed or cut ($rc): $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: a dry run"
"$py" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

# 1. the graphs at every width (captured against eager, a failed capture eager) and the width check's coverage of
#    what a static decode feeds (widths to 32, both decoders' cache length, the prefill with masks)
step 60 "$py" -m pytest -rs -p no:cacheprovider --junitxml="$out/graph_tests.xml" tests/runtime/test_graphs.py \
    tests/runtime/test_slots.py "tests/runtime/test_invariance.py::test_the_check_covers_every_width_and_cache_length_a_static_decode_feeds" \
    "tests/test_default_model.py::test_static_shapes_decode_one_token_decodings_answer_in_each_dtype"
# 2. identity on the embedded model, 18 held-out + 18 never-trained: verified = one-token, where each first parts
step 75 "$py" benchmarks/exactness.py --static --batched --limit "$limit" --max-new-tokens "$tokens" \
    --json "$out/identity.json"
common=(--block-sizes 4 --thresholds 0.9 --verified-thresholds 0.3 --max-new-tokens "$tokens")
# 3. batch 1, held-out prompts (prepare() is static on a GPU: ar and mars_verified are the static decoders), warmed on
#    every prompt it times (the floors: one-token >= 400 tok/s, verified >= 1.5x one-token and >= 2x generate)
step 90 $bench --methods hf_generate,ar,mars_verified --batch-sizes 1 "${common[@]}" --limit "$limit" --repeats 1 \
    --json "$out/b1.json"
# 4. a forward's time by width at two context lengths, under the served runtime (each width captured, then timed)
step 45 "$py" - "$out/forward_by_width.json" "$widths" "$contexts" <<'EOF'
import json, sys
from mars_core.evaluation.bench import forward_seconds
from mars_core.evaluation.loading import load_prepared
from mars_core.runtime.graphs import graph_counts
path, widths, contexts = sys.argv[1], [int(w) for w in sys.argv[2].split()], [int(c) for c in sys.argv[3].split()]
model, tokenizer, runtime = load_prepared(None, measure_cost=False)
ms = {c: {w: round(1e3 * forward_seconds(model, tokenizer, ["Count to ten"], w, c, runtime=runtime), 3)
          for w in widths} for c in contexts}
print(json.dumps(ms))
json.dump({"machine": runtime.record(model), "ms_by_context_and_width": ms, "graphs": graph_counts()},
          open(path, "w"), indent=1)
EOF
# 5. as time allows: transformers' own fast path (its static cache and a compiled forward, CUDA graphs), warmed on
#    every prompt length it meets; batches 16 and 64; one steady verified step under the profiler
step 100 $bench --methods hf_compiled,mars_verified --batch-sizes 1 "${common[@]}" --limit "$few" --repeats 1 \
    --json "$out/b1_hf_compiled.json"
step 45 $bench --methods hf_generate,mars_block,mars_verified --batch-sizes "$wide" "${common[@]}" \
    --limit "$wide" --repeats 1 --json "$out/b$wide.json"
step 45 $bench --methods hf_generate,mars_block,mars_verified --batch-sizes "$wider" "${common[@]}" \
    --limit "$wider" --repeats 1 --json "$out/b$wider.json"
step 45 "$py" benchmarks/static_profile.py --limit 2 --max-new-tokens "$tokens" --out "$out/profile.txt"
echo "== done in $(( SECONDS - began )) s"
ls -l "$out"
