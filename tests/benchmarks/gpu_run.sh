#!/usr/bin/env bash
# The GPU check in one command, on a machine with no network that has its own Python with
# torch, transformers, sentence-transformers, tokenizers, numpy, pyarrow and onnxruntime:
#
#     bash tests/benchmarks/gpu_run.sh PACK [OUT.json]
#
# PACK is the folder `python -m tests.benchmarks.gpu_pack pack PACK` wrote (docs/performance.md,
# "The GPU check"). Run from the repository root. It installs the wheels into a folder put
# first on PYTHONPATH (so they sit before the machine's own packages, whatever its Python
# is: a virtual environment of a virtual environment would not see the machine's torch),
# builds the stand-in model (random weights, the real shapes and tokenizer), and runs
# tests/benchmarks/gpu_check.py over the packed corpus.
#
# GPU_CHECK_PART: goals (the default: one call), comparisons (a second call) or all.
# GPU_CHECK_BUDGET: the call's seconds, setup included (default 560, under a device call's
#   600): gpu_check starts no step it expects to end past them.
# GPU_CHECK_ARGS: more options for gpu_check (e.g. "--skip langchain --copies 2").
# GPU_RUN_DIR: where the setup is kept (build/gpu-run): a second call on the same machine
#   reuses it, and the comparisons find Prefect's database the goals' first ingest made.
# PYTHON: the interpreter (python3).
set -euo pipefail
pack=$(cd "$1" && pwd)
out=${2:-${OUT:-.}/gpu-check.json}
python=${PYTHON:-python3}
part=${GPU_CHECK_PART:-goals}
budget=${GPU_CHECK_BUDGET:-560}
dir=${GPU_RUN_DIR:-build/gpu-run}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
started=$(date +%s.%N)
since() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }
phase() { echo "gpu_run: $1 in $(since "$2") s" >&2; }

# Compiled bytecode, as on any installed machine: the device image ships its packages
# without it and its Python wrote none (seen 2026-11-26: every process compiled torch,
# transformers and sentence-transformers from source again, ~8 s, the GIL held). A cache
# folder of our own works whatever the image; filled once below by a warm-up that imports
# what LangChain's job and the model import and runs a small ingest, it serves the
# measured commands alike.
echo "gpu_run: PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}" >&2
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$dir/pycache"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export ANONYMIZED_TELEMETRY=False PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_UI_ENABLED=false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90
export PATH="$dir/site/bin:$PATH"  # py-spy, for gpu_check --profile; the `chroma` command
export PYTHONPATH="$PWD:$dir/site:$dir/standin"
corpus="$dir/corpus"
[ -f "$pack/corpus.tar.xz" ] || corpus=${CORPUS:?no corpus in the pack: set CORPUS}

# The setup, once per pack and machine: the stamp is the pack's packages and wheels.
stamp=$(cd "$pack" && cat packages.json wheels.tar.xz | md5sum)
if [ "$(cat "$dir/set-up" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "${dir:?}"/{unzipped,site,standin,corpus,warm,set-up}
    if [ -f "$pack/corpus.tar.xz" ]; then tar -xJf "$pack/corpus.tar.xz" -C "$dir"; fi
    # the stand-in needs only the machine's torch and transformers: built beside the rest
    # (neither it nor the install sees the folder the install fills)
    t=$(date +%s.%N)
    PYTHONPATH="$PWD" "$python" -m tests.benchmarks.gpu_pack standin "$pack/model" "$dir/standin" \
        >/dev/null &
    standin=$!
    tar -xJf "$pack/wheels.tar.xz" -C "$dir"; phase "wheels unpacked" "$t"
    PYTHONPATH="$PWD" "$python" -m tests.benchmarks.gpu_pack install "$dir/unzipped" "$dir/site" \
        "$pack"/tools/*.whl
    rm -rf "$dir/unzipped"; phase "wheels installed" "$t"
    wait "$standin"; phase "stand-in model built" "$t"
    # the bytecode: LangChain's imports, the model's, and a small ingest run side by side
    t=$(date +%s.%N)
    "$python" -m tests.benchmarks.gpu_pack warm langchain &
    "$python" -m tests.benchmarks.gpu_pack warm model &
    "$python" -m tests.benchmarks.gpu_pack warm ingest --corpus "$corpus" --work "$dir/warm" \
        > "$dir/warm-ingest.log" 2>&1 &
    ingest=$!
    wait "$ingest" || { tail -20 "$dir/warm-ingest.log" >&2; exit 1; }
    tail -1 "$dir/warm-ingest.log" >&2
    for job in $(jobs -p); do wait "$job"; done
    phase "bytecode compiled" "$t"
    echo "$stamp" > "$dir/set-up"
fi
setup=$(since "$started")
echo "gpu_run: set up in $setup s" >&2

# The goals' first ingest is the machine's first run: a new Prefect database for it.
case "$part" in goals|all) rm -rf "$dir/prefect" ;; esac
export PREFECT_HOME="$dir/prefect"
export GPU_RUN_SETUP_S="$setup"  # recorded in the JSON beside the call's own seconds
left=$(echo "$budget $setup" | awk '{printf "%d", $1 - $2}')
# shellcheck disable=SC2086  # the options are words
"$python" -m tests.benchmarks.gpu_check --corpus "$corpus" --out "$out" --part "$part" \
    --budget "$left" ${GPU_CHECK_ARGS:-}
