#!/usr/bin/env bash
# Runs a command with a Docker daemon answering at DOCKER_HOST.
#
# The daemon is, in this order: the one DOCKER_HOST names, the default socket's (DOCKER_HOST is
# then unset for the command, never left naming a dead one), the project's own if another run
# started it, or else one started here: Debian's docker.io (installed when missing, as root where
# apt works) with the flags a machine without a bridge or iptables needs, its data in the cache
# outside the checkout (images and build layers survive for the next run). A daemon that does not
# answer `docker version` within COMPAT_DOCKER_ANSWER_TIMEOUT seconds (default 20) counts as not
# answering: a wedged daemon does not hang the run.
#
# The command is exec'd: it is this process, so Ctrl-C or a kill sent to the wrapper reaches the
# command itself, and the wrapper's exit status is the command's. Every run holds a shared lock on
# the project's daemon (descriptor 9, kept through the exec); a daemon started here is stopped by
# a watcher once every run that uses it has ended (the watcher waits for an exclusive lock, which a
# run releases with its last descriptor, even when it is killed with SIGKILL). Neither the daemon
# nor the watcher keeps a run's lock descriptors, so no orphan holds the start lock or the shared
# one. Where no daemon can be had, the command runs without one and says why (the image tests then
# skip, or fail under CI).
#
# usage: scripts/with-docker.sh COMMAND [ARG...]
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${COMPAT_DOCKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginex-compat/docker}
run_dir="$cache/run"
own_sock="unix://$run_dir/docker.sock"
START_TIMEOUT=${COMPAT_DOCKER_START_TIMEOUT:-90}
ANSWER_TIMEOUT=${COMPAT_DOCKER_ANSWER_TIMEOUT:-20}
STOP_TIMEOUT=60

answers() {  # whether a daemon answers at $1 ("" = the client's default) within ANSWER_TIMEOUT
    if [ -n "$1" ]; then
        DOCKER_HOST=$1 timeout -k 5 "$ANSWER_TIMEOUT" docker version -f '{{.Server.Version}}' >/dev/null 2>&1
    else
        env -u DOCKER_HOST timeout -k 5 "$ANSWER_TIMEOUT" docker version -f '{{.Server.Version}}' >/dev/null 2>&1
    fi
}

alive() {  # whether process $1 runs (a zombie, dead but not yet reaped, does not)
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

use() {  # exec the command against the daemon at $1 ("" = the default socket's)
    if [ -n "$1" ]; then export DOCKER_HOST=$1; else unset DOCKER_HOST; fi
    exec 7>&-  # the start lock is this wrapper's, never the command's
    exec "${@:2}"
}

if command -v docker >/dev/null; then
    if [ -n "${DOCKER_HOST:-}" ]; then
        if answers "$DOCKER_HOST"; then use "$DOCKER_HOST" "$@"; fi
        echo "with-docker: DOCKER_HOST=$DOCKER_HOST does not answer within ${ANSWER_TIMEOUT}s" >&2
    fi
    if answers ""; then
        [ -z "${DOCKER_HOST:-}" ] || echo "with-docker: using the default socket's daemon (DOCKER_HOST unset for the command)" >&2
        use "" "$@"
    fi
fi

mkdir -p "$run_dir"
exec 9>"$run_dir/lock"
flock -s 9
if command -v docker >/dev/null && answers "$own_sock"; then use "$own_sock" "$@"; fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "with-docker: no Docker daemon answers and none can be started here (needs root and apt-get); running without one" >&2
    exec 9>&-
    exec "$@"
fi
"$here/scripts/apt-install.sh" docker.io
# Only one run starts it: the others wait here, then find it answering.
exec 7>"$run_dir/start.lock"
flock 7
if answers "$own_sock"; then use "$own_sock" "$@"; fi

# Our daemon runs but does not answer: still starting (its starter was killed), or wedged. A second
# one on the same data root would corrupt it: wait for it to answer, else say so and stop.
if [ -s "$run_dir/dockerd.pid" ]; then
    old=$(cat "$run_dir/dockerd.pid")
    if alive "$old" && [ "$(cat "/proc/$old/comm" 2>/dev/null)" = dockerd ]; then
        for _ in $(seq "$START_TIMEOUT"); do
            if answers "$own_sock"; then use "$own_sock" "$@"; fi
            alive "$old" || break
            sleep 1
        done
        if alive "$old"; then
            echo "with-docker: the project's dockerd (pid $old) runs but does not answer at $own_sock;" \
                "stop it (kill $old) and run again" >&2
            exit 1
        fi
    fi
fi

echo "with-docker: starting dockerd (data in $cache)" >&2
rm -f "$run_dir/docker.sock" "$run_dir/dockerd.pid"
# No bridge and no iptables: containers use --network host or none (a sandbox without NET_ADMIN
# has neither). Its own containerd, exec root and pid file, so nothing collides with a system one.
# The lock descriptors are closed for it: it outlives this process, and must not hold them.
dockerd --host "$own_sock" --data-root "$cache/data" --exec-root "$run_dir/exec" --pidfile "$run_dir/dockerd.pid" \
    --iptables=false --bridge=none </dev/null >"$cache/dockerd.log" 2>&1 7>&- 9>&- &
pid=$!
# The watcher: once every run that uses the daemon has ended (the exclusive lock), it stops the
# daemon, holding the lock until it is gone so that no run starts to use it meanwhile.
(
    exec 7>&- 9>&- 8>"$run_dir/lock" </dev/null >>"$cache/dockerd.log" 2>&1
    flock -x 8
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq "$STOP_TIMEOUT"); do
        alive "$pid" || break
        sleep 1
    done
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    echo "with-docker: dockerd stopped"
) &
trap "exit 130" INT
trap "exit 143" TERM
for _ in $(seq "$START_TIMEOUT"); do
    answers "$own_sock" && break
    alive "$pid" || { echo "with-docker: dockerd exited; its log:" >&2; tail -n 20 "$cache/dockerd.log" >&2; exit 1; }
    sleep 1
done
answers "$own_sock" || { echo "with-docker: dockerd did not answer within ${START_TIMEOUT}s; log: $cache/dockerd.log" >&2; exit 1; }
trap - INT TERM
echo "with-docker: dockerd $(DOCKER_HOST=$own_sock docker version -f '{{.Server.Version}}') at $own_sock" >&2
use "$own_sock" "$@"
