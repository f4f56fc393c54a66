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

# The real path of $1, which need not exist yet: its deepest existing directory with symlinks
# resolved, the rest appended. Fails where that directory cannot be entered, and where the rest
# climbs with "..": mkdir -p would follow it out of (or into) what was resolved.
real_path() {
    local path=$1 rest="" dir
    while [ ! -d "$path" ]; do
        rest="/${path##*/}$rest"
        path=${path%/*}
        [ -n "$path" ] || path=/
    done
    case "$rest/" in */../*) return 1 ;; esac
    dir=$(cd "$path" 2>/dev/null && pwd -P) || return 1
    printf '%s%s\n' "${dir%/}" "$rest"
}

# vLLM's model-class inspections, written at the image's build with vLLM's own code
# (compat_build/image_steps/bake_modelinfos.py), copied where this start's vLLM keeps its cache
# unless that cache has its own: vLLM >= 0.10 otherwise inspects the model's class in a subprocess
# that imports vLLM a second time (8-10 s) at every start of a container, whose cache is new.
# vLLM uses an entry only while it matches the hash of the model's source, and it is the answer
# vLLM would have computed: the start changes by that wait alone, and by nothing else (no argument,
# no variable). Never under COMPAT_DISABLE=1, never into the model directory (a cache root that
# resolves inside it is left to vLLM, as the launcher leaves a work dir there unused), within
# CHECK_TIMEOUT seconds where coreutils' timeout is there; a copy that fails is left to vLLM.
seed_vllm_cache() {
    local seed="$COMPAT_HOME/vllm-cache/modelinfos" root real_root real_model
    [ -d "$seed" ] || return 0
    if [ -n "${VLLM_CACHE_ROOT:-}" ]; then
        root=$VLLM_CACHE_ROOT
    elif [ -n "${XDG_CACHE_HOME:-}" ]; then
        root=$XDG_CACHE_HOME/vllm
    elif [ -n "${HOME:-}" ]; then
        root=$HOME/.cache/vllm
    else
        return 0  # vLLM would ask the password database: not guessed here
    fi
    case "$root" in /*) ;; *) return 0 ;; esac
    [ -e "$root/modelinfos" ] && return 0
    real_root=$(real_path "$root") || {
        echo "[compat] vLLM's cache $root cannot be resolved to a real path: its model-class inspections are left to vLLM" >&2
        return 0
    }
    if real_model=$(real_path "$MODEL_DIR"); then
        case "$real_root/" in
            "$real_model"/*)
                echo "[compat] vLLM's cache $root is inside the model directory, which is never written: its model-class inspections are left to vLLM" >&2
                return 0
                ;;
        esac
    fi
    mkdir -p "$root" 2>/dev/null && bounded cp -R "$seed" "$root/.modelinfos.$$" 2>/dev/null \
        && mv -T "$root/.modelinfos.$$" "$root/modelinfos" 2>/dev/null
    rm -rf "$root/.modelinfos.$$" 2>/dev/null
    return 0
}
[ "${COMPAT_DISABLE:-0}" = "1" ] || seed_vllm_cache

# `docker run --rm IMAGE selftest [--card CARD] [--json]`: the image checks itself instead of
# starting vLLM (common/build_checks/selftest.py: this entrypoint on the models bundled with the image, vLLM
# replaced by a recorder). No argument list vLLM takes starts with this word, nor with `doctor`.
if [ "${1-}" = "selftest" ]; then
    shift
    exec "$COMPAT_PYTHON" "$COMPAT_HOME/common/build_checks/selftest.py" "$@"
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
