#!/usr/bin/env bash
# Installs Debian packages the project's own targets need (docker.io, docker-registry,
# debootstrap, libnuma-dev), one install at a time.
#
# `make -j4 envs` and the image targets can ask for packages at the same moment, and apt-get holds
# dpkg's frontend lock: a second apt-get fails at once ("Could not get lock"). Every install of the
# project goes through here: a lock of our own serialises them, and DPkg::Lock::Timeout makes
# apt-get wait for an install that something else runs. Packages already installed cost nothing.
#
# usage: scripts/apt-install.sh PACKAGE...
set -euo pipefail

missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "apt-install: ${missing[*]} missing; install them (Debian/Ubuntu packages) as root, then rerun" >&2
    exit 1
fi

exec 8>/var/lock/enginex-compat-apt.lock
flock 8
export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -y -q -o DPkg::Lock::Timeout=600)
echo "apt-install: installing ${missing[*]}"
"${apt[@]}" install "${missing[@]}" >/dev/null || { "${apt[@]}" update >/dev/null && "${apt[@]}" install "${missing[@]}" >/dev/null; }
