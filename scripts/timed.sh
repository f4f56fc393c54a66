#!/usr/bin/env bash
# Runs one step of `make test`'s set-up and, where COMPAT_SETUP_TIMES names a file, appends the
# step's name, its start and end (seconds since the epoch) and its exit status to it, one line
# of tab-separated fields: the run's last lines print them (conftest.py), so that what the set-up
# costs from empty caches is measured step by step, not guessed.
#
# A signal to this wrapper (make passes SIGTERM and SIGINT on to its children) goes on to the step.
#
# usage: scripts/timed.sh STEP COMMAND [ARG...]
set -u
step=$1
shift
start=$(date +%s.%N)
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"
status=$?
while kill -0 "$child" 2>/dev/null; do  # a signal interrupted the wait: the step is still ending
    wait "$child"
    status=$?
done
if [ -n "${COMPAT_SETUP_TIMES:-}" ]; then
    printf '%s\t%s\t%s\t%s\n' "$step" "$start" "$(date +%s.%N)" "$status" >>"$COMPAT_SETUP_TIMES"
fi
exit "$status"
