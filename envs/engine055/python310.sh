#!/usr/bin/env bash
# Prints a command for Python 3.10, the BI-100 image's Python, which .venv-engine055 must be
# built with (vLLM 0.5.5 and its compiled extension follow the card's interpreter).
# `python3.10` on PATH when it runs; else the newest 3.10 that pyenv holds (pyenv's shim for
# python3.10 exists but refuses to run when 3.10 is not among the selected versions).
set -euo pipefail
if python3.10 -c '' >/dev/null 2>&1; then
    echo python3.10
    exit 0
fi
if command -v pyenv >/dev/null; then
    version=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.10(\.[0-9]+)?$' | sort -V | tail -n 1 || true)
    if [ -n "$version" ] && [ -x "$(pyenv root)/versions/$version/bin/python3.10" ]; then
        echo "$(pyenv root)/versions/$version/bin/python3.10"
        exit 0
    fi
fi
echo "engine055: no Python 3.10 found (python3.10 on PATH, or pyenv install 3.10)" >&2
exit 2
