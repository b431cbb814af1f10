#!/usr/bin/env bash
# MARS on llama.cpp's CUDA build: the llama.cpp rows of docs/speed.md on a GPU machine, beside our torch rows on
# the same GPU. Needs llama-cpp-python built with CUDA:
#   CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36
# then:  bash benchmarks/llamacpp_gpu.sh runs/llamacpp_gpu
# MARS_BENCH names the bench command (default mars-bench; "python -m mars_core.evaluation.bench" without the
# console script) and PYTHON the interpreter (default python); LIMIT, TOKENS and REPEATS shrink the run (defaults
# 18, 64, 3: the floors). Each step writes its JSON as it ends and a failed step does not stop the next, so
# a run cut short keeps what it measured.
set -uo pipefail
out=${1:-runs/llamacpp_gpu}
bench=${MARS_BENCH:-mars-bench}
mkdir -p "$out"

"${PYTHON:-python}" -c "
import llama_cpp, sys
from mars_core.engines.llamacpp.engine import backend_devices
devices = backend_devices(llama_cpp)
print('llama.cpp devices:', devices)
if not any(kind == 'GPU' for kind, _ in devices):
    sys.exit('this llama-cpp-python has no GPU backend: CMAKE_ARGS=\"-DGGML_CUDA=on\" pip install '
             '--force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36')
" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# The floors: batch 1, B = 4, 18 held-out prompts, 64 new tokens, three interleaved repeats.
common=(--batch-sizes 1 --block-sizes 4 --verified-thresholds 0.3 --max-new-tokens "${TOKENS:-64}"
        --limit "${LIMIT:-18}" --repeats "${REPEATS:-3}")
step() { echo "== $*"; "$@" || echo "== failed ($?): $*"; }
# llama.cpp rows first (--layout fixed: no torch cost curve is needed for them), then our torch rows on the same
# GPU (bf16, what load() picks there), the never-trained split, and the invariant engine (every forward two rows)
llama=(--llamacpp-weights f32,bf16,q8_0 --layout fixed)
step $bench --methods llamacpp_ar,llamacpp_lookup,llamacpp_verified "${llama[@]}" "${common[@]}" \
    --json "$out/gpu_b1.json"
step $bench --methods hf_generate,mars_verified "${common[@]}" --json "$out/gpu_b1_torch.json"
step $bench --split never_trained --methods llamacpp_ar,llamacpp_verified "${llama[@]}" "${common[@]}" \
    --json "$out/gpu_b1_never_trained.json"
step $bench --llamacpp-invariant --methods llamacpp_ar,llamacpp_verified "${llama[@]}" "${common[@]}" \
    --json "$out/gpu_b1_invariant.json"
