"""Check at image build that the image's Python finds the vLLM plugin (R8-R12) only when asked.

usage: python3 -m common.build_checks.vllm_plugin_check [PLUGIN_DIR]   (default: common/vllm_plugin)

vLLM discovers general plugins through importlib.metadata entry points. The plugin is not
installed: its directory holds a `*.dist-info` that the repairs put first on PYTHONPATH. With the
directory on PYTHONPATH the image's own Python must see the entry point and load it (the module
imports without torch); without it the entry point must not exist, so that no model the
preflight did not ask for runs through the plugin. R12's config classes are registered by the
directory's sitecustomize at interpreter start: asked for every type it carries, the image's
AutoConfig must then know each one. Exits 1 with one line when any of it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Optional

from .. import PLUGIN_DIR
from ..vllm_plugin.compat_configs import CLASSES
from ..vllm_plugin.compat_configs import ENV as CONFIGS_ENV

GROUP = "vllm.general_plugins"
NAME = "compat_weights"
PROBE = (
    "from importlib.metadata import entry_points\n"
    f"found = [ep for ep in entry_points(group={GROUP!r}) if ep.name == {NAME!r}]\n"
    "print(len(found), callable(found[0].load()) if found else False)\n"
)
# Run with COMPAT_CONFIGS naming every type the image carries: the types AutoConfig still lacks.
CONFIGS_PROBE = (
    "import os\n"
    "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
    "print(' '.join(t for t in os.environ['COMPAT_CONFIGS'].split(',') if t not in CONFIG_MAPPING) or 'ok')\n"
)


def probe(pythonpath: str, code: str = PROBE, extra_env: Optional[Dict[str, str]] = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, check=False)
    text = out.stdout.strip() or out.stderr.strip()
    return text.splitlines()[-1] if text else f"exit {out.returncode}"


def main(argv: list) -> int:
    if len(argv) > 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    argv = argv or [PLUGIN_DIR]
    asked, unasked = probe(argv[0]), probe("")
    if asked != "1 True":
        print(
            f"vllm_plugin_check: with {argv[0]} on PYTHONPATH, {sys.executable} does not load the {NAME} entry point ({asked})",
            file=sys.stderr,
        )
        return 1
    if unasked != "0 False":
        print(f"vllm_plugin_check: {sys.executable} finds the {NAME} entry point without being asked ({unasked})", file=sys.stderr)
        return 1
    types = sorted(CLASSES)
    lacking = probe(argv[0], CONFIGS_PROBE, {CONFIGS_ENV: ",".join(types)})
    if lacking != "ok":
        print(f"vllm_plugin_check: with {CONFIGS_ENV}={','.join(types)}, {sys.executable}'s AutoConfig lacks: {lacking}", file=sys.stderr)
        return 1
    print(f"vLLM plugin: {NAME} found with {argv[0]} on PYTHONPATH only; config classes known: {', '.join(types)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
