#!/usr/bin/env bash
# Entrypoint of every compat image: run the preflight, which execs `vllm serve` with the repairs.
# If Python itself cannot run the preflight (broken interpreter, missing package), start vLLM
# exactly as the platform asked: a preflight problem must never keep a model from starting.
# The launcher is exec'd, not called: once it has exec'd vLLM, vLLM's exit is the container's.
# Whether it can start at all is checked first, since after an exec there is no fallback.
# Nothing is exported: vLLM inherits this environment, and a clean model must reach it unchanged
# (bootstrap.py finds the package without PYTHONPATH; the launcher has the same defaults).
set -u

MODEL_DIR=${MODEL_DIR:-/model}
COMPAT_HOME=${COMPAT_HOME:-/opt/enginex-compat}
COMPAT_PYTHON=${COMPAT_PYTHON:-python3}
COMPAT_VLLM=${COMPAT_VLLM:-vllm}
BOOTSTRAP="$COMPAT_HOME/common/bootstrap.py"

# The import check runs under coreutils' timeout where the image has it (a hung interpreter must
# not hang the start: after CHECK_TIMEOUT seconds its whole process group is killed and vLLM
# starts without repairs), unbounded where it has not (busybox's timeout takes other options).
# The launcher bounds itself (COMPAT_TIMEOUT).
CHECK_TIMEOUT=${COMPAT_CHECK_TIMEOUT:-30}
case "$CHECK_TIMEOUT" in
    '' | 0 | *[!0-9]*) CHECK_TIMEOUT=30 ;;
esac

bounded() {
    case "$(timeout --version 2>/dev/null)" in
        *coreutils*) timeout -k 5 "$CHECK_TIMEOUT" "$@" ;;
        *) "$@" ;;
    esac
}

# `docker run --rm IMAGE selftest [--card CARD] [--json]`: the image checks itself instead of
# starting vLLM (common/image_checks/selftest.py: this entrypoint on the models bundled with the image, vLLM
# replaced by a recorder). No argument list vLLM takes starts with this word, nor with `doctor`.
if [ "${1-}" = "selftest" ]; then
    shift
    exec "$COMPAT_PYTHON" "$COMPAT_HOME/common/image_checks/selftest.py" "$@"
fi
# `docker run --rm -v MODEL:/model:ro IMAGE doctor [--json]`: the user's pre-submit check, the
# image's own engine verifying every repair; the card is the image's unless --card says another.
if [ "${1-}" = "doctor" ]; then
    shift
    exec "$COMPAT_PYTHON" "$BOOTSTRAP" doctor "$MODEL_DIR" "$@"
fi

if [ "${COMPAT_DISABLE:-0}" != "1" ]; then
    if bounded "$COMPAT_PYTHON" "$BOOTSTRAP" check 2>/dev/null; then
        exec "$COMPAT_PYTHON" "$BOOTSTRAP" launch -- "$@"
    fi
    echo "[compat] preflight could not run ($COMPAT_PYTHON cannot import the compat package, or did not within ${CHECK_TIMEOUT}s); starting vLLM without repairs" >&2
else
    echo "[compat] COMPAT_DISABLE=1: starting vLLM untouched" >&2
fi
exec "$COMPAT_VLLM" serve "$MODEL_DIR" "$@"
