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
# tests/benchmarks/gpu_check.py over the packed corpus. Set GPU_CHECK_ARGS for its options (e.g. "--skip langchain --copies 2");
# PYTHON picks the interpreter (python3).
set -euo pipefail
pack=$(cd "$1" && pwd)
out=${2:-${OUT:-.}/gpu-check.json}
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-run-XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

# Compiled bytecode, as on any installed machine: the device image ships its packages
# without it and its Python wrote none (seen 2026-11-26: every process compiled torch,
# transformers and sentence-transformers from source again, ~8 s, the GIL held). A cache
# folder of our own works whatever the image; filled once below by a warm-up that imports
# what the measured commands import, it serves docflow and LangChain alike.
echo "gpu_run: PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}" >&2
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$work/pycache"

tar -xJf "$pack/wheels.tar.xz" -C "$work"        # work/unzipped/<wheel name>/...
py=$python
"$py" -m tests.benchmarks.gpu_pack wheels "$work/unzipped" "$work/wheels"
"$py" -m pip install -q --no-index --no-deps --no-compile --ignore-requires-python \
    --target "$work/site" "$work"/wheels/*.whl "$pack"/tools/*.whl
"$py" -m tests.benchmarks.gpu_pack standin "$pack/model" "$work/standin"
PYTHONPATH="$PWD:$work/site:$work/standin" "$py" -m tests.benchmarks.gpu_pack warm  # bytecode
corpus="$work/corpus"
if [ -f "$pack/corpus.tar.xz" ]; then tar -xJf "$pack/corpus.tar.xz" -C "$work"; else corpus=${CORPUS:?no corpus in the pack: set CORPUS}; fi
echo "gpu_run: set up in $(( $(date +%s) - started )) s" >&2

export PATH="$work/site/bin:$PATH"  # py-spy, for gpu_check --profile
export PYTHONPATH="$PWD:$work/site:$work/standin" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export ANONYMIZED_TELEMETRY=False PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_UI_ENABLED=false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90 PREFECT_HOME="$work/prefect"
# shellcheck disable=SC2086  # the options are words
"$py" -m tests.benchmarks.gpu_check --corpus "$corpus" --out "$out" ${GPU_CHECK_ARGS:-}
