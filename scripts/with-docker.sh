#!/usr/bin/env bash
# Runs a command with a Docker daemon answering at DOCKER_HOST.
#
# The daemon is, in this order: the one DOCKER_HOST names, the default socket's, the project's own
# if another run started it, or else one started here for this command: Debian's docker.io
# (installed when missing, as root where apt works) with the flags a machine without a bridge or
# iptables needs, its data in the cache outside the checkout (images and build layers survive for
# the next run). A daemon started here is stopped when the command ends, after every other run that
# uses it has ended (they hold a shared lock on it; the starter waits for an exclusive one).
# Where no daemon can be had, the command runs without one and says why (the image tests then skip,
# or fail under CI).
#
# usage: scripts/with-docker.sh COMMAND [ARG...]
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${COMPAT_DOCKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginex-compat/docker}
run_dir="$cache/run"
own_sock="unix://$run_dir/docker.sock"
START_TIMEOUT=${COMPAT_DOCKER_START_TIMEOUT:-90}

answers() {  # whether a daemon answers at $1 ("" = the client's default)
    if [ -n "$1" ]; then DOCKER_HOST=$1 docker version -f '{{.Server.Version}}' >/dev/null 2>&1
    else env -u DOCKER_HOST docker version -f '{{.Server.Version}}' >/dev/null 2>&1; fi
}

use() {  # run the command against the daemon at $1, sharing it with any other run
    export DOCKER_HOST=$1
    exec "${@:2}"
}

if command -v docker >/dev/null; then
    if [ -n "${DOCKER_HOST:-}" ] && answers "$DOCKER_HOST"; then use "$DOCKER_HOST" "$@"; fi
    if answers ""; then exec "$@"; fi
fi

mkdir -p "$run_dir"
exec 9>"$run_dir/lock"
flock -s 9
if command -v docker >/dev/null && answers "$own_sock"; then use "$own_sock" "$@"; fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "with-docker: no Docker daemon answers and none can be started here (needs root and apt-get); running without one" >&2
    exec "$@"
fi
"$here/scripts/apt-install.sh" docker.io
# Only one run starts it: the others wait here, then find it answering.
exec 7>"$run_dir/start.lock"
flock 7
if answers "$own_sock"; then flock -u 7; use "$own_sock" "$@"; fi

echo "with-docker: starting dockerd (data in $cache)"
rm -f "$run_dir/docker.sock" "$run_dir/dockerd.pid"
# No bridge and no iptables: containers use --network host or none (a sandbox without NET_ADMIN
# has neither). Its own containerd, exec root and pid file, so nothing collides with a system one.
dockerd --host "$own_sock" --data-root "$cache/data" --exec-root "$run_dir/exec" --pidfile "$run_dir/dockerd.pid" \
    --iptables=false --bridge=none >"$cache/dockerd.log" 2>&1 &
pid=$!
stop() {
    flock -x 9  # every other run that uses the daemon has ended
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    echo "with-docker: dockerd stopped"
}
trap stop EXIT
trap "exit 130" INT TERM
for _ in $(seq "$START_TIMEOUT"); do
    answers "$own_sock" && break
    kill -0 "$pid" 2>/dev/null || { echo "with-docker: dockerd exited; its log:" >&2; tail -n 20 "$cache/dockerd.log" >&2; exit 1; }
    sleep 1
done
answers "$own_sock" || { echo "with-docker: dockerd did not answer within ${START_TIMEOUT}s; log: $cache/dockerd.log" >&2; exit 1; }
flock -u 7
export DOCKER_HOST=$own_sock
echo "with-docker: dockerd $(docker version -f '{{.Server.Version}}') at $DOCKER_HOST"
"$@"
