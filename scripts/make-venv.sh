#!/usr/bin/env bash
# Builds the virtual environment described by envs/NAME/ and links it at LINK.
#
# Venvs live in a cache outside the checkout, keyed by the hash of the env's spec files and the
# Python version, so a fresh clone on the same machine reuses a 6 GB engine venv instead of
# rebuilding it. A venv is only linked once its install finished (".complete" marker); a half-built
# one is removed and rebuilt. Two makes that want the same venv at once (`make test` in one
# terminal, `make demo` in another) take turns on a lock beside it: the second links what the
# first built instead of removing it half-way.
#
# usage: scripts/make-venv.sh NAME LINK PYTHON
set -euo pipefail

name=$1 link=$2 python=$3
here=$(cd "$(dirname "$0")/.." && pwd)
spec="$here/envs/$name"
cache=${COMPAT_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enginex-compat/venvs}

[ -d "$spec" ] || { echo "make-venv: no env spec at envs/$name" >&2; exit 2; }
command -v "$python" >/dev/null || { echo "make-venv: $python not found; install it first" >&2; exit 2; }

pyver=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
# envs/source_edits.py: the applier the env's harness patches import while it is built.
key=$( { echo "$pyver"; cat "$here/scripts/make-venv.sh" "$here/envs/source_edits.py"; find "$spec" -type f | sort | xargs cat; } \
       | sha256sum | cut -c1-12)
target="$cache/$name-$key"

mkdir -p "$cache"
exec 7>"$target.lock"
flock 7

if [ ! -f "$target/.complete" ]; then
    echo "make-venv: building $name ($pyver) in $target"
    rm -rf "$target"
    "$python" -m venv "$target"
    "$target/bin/python" -m pip install -q --upgrade pip
    PY="$target/bin/python" VENV="$target" bash "$spec/install.sh"
    touch "$target/.complete"
fi

# Replace the link atomically; never delete a real directory a user made at LINK.
if [ -e "$link" ] && [ ! -L "$link" ]; then
    echo "make-venv: $link exists and is not a link; remove it to let make manage it" >&2
    exit 2
fi
ln -sfn "$target" "$link.tmp.$$" && mv -Tf "$link.tmp.$$" "$link"
echo "make-venv: $link -> $target"
