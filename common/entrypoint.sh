#!/usr/bin/env bash
# Entrypoint of every compat image: run the preflight, which execs `vllm serve` with the repairs.
# If Python itself cannot run the preflight (broken interpreter, missing package), start vLLM
# exactly as the platform asked: a preflight problem must never keep a model from starting.
# The launcher is exec'd, not called: once it has exec'd vLLM, vLLM's exit is the container's.
# Whether it can start at all is checked first, since after an exec there is no fallback.
set -u

MODEL_DIR=${MODEL_DIR:-/model}
COMPAT_HOME=${COMPAT_HOME:-/opt/enginex-compat}
COMPAT_PYTHON=${COMPAT_PYTHON:-python3}
COMPAT_VLLM=${COMPAT_VLLM:-vllm}
export MODEL_DIR COMPAT_VLLM

if [ "${COMPAT_DISABLE:-0}" != "1" ]; then
    export PYTHONPATH="$COMPAT_HOME${PYTHONPATH:+:$PYTHONPATH}"
    if "$COMPAT_PYTHON" -c "import common.launch" 2>/dev/null; then
        exec "$COMPAT_PYTHON" -m common launch -- "$@"
    fi
    echo "[compat] preflight could not run ($COMPAT_PYTHON cannot import the compat package); starting vLLM without repairs" >&2
else
    echo "[compat] COMPAT_DISABLE=1: starting vLLM untouched" >&2
fi
exec "$COMPAT_VLLM" serve "$MODEL_DIR" "$@"
