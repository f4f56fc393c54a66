"""Run a rendered Dockerfile's COPY and RUN steps on this machine, against a real Python and its
real site-packages, with the image's filesystem rooted in a temporary directory.

No Docker daemon runs here, so this is how the tests prove that the build steps of each card
work on the engine's real packages: the image home (/opt/enginex-compat) maps into ROOT_DIR,
`python3` is the engine venv's interpreter, and `extra_path` (shadow packages whose files may be
patched) goes after the image home on PYTHONPATH, the way the image's site-packages would.
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import List, Tuple

from dockerfile_parse import DockerfileParser

HOME = "/opt/enginex-compat"


def run_steps(context: Path, image_root: Path, python: str, extra_path: str = "") -> List[Tuple[str, int, str]]:
    """Each step as (instruction line, exit status, output); stops at the first failing RUN."""
    parser = DockerfileParser(path=str(context / "Dockerfile"))
    home = image_root / HOME.lstrip("/")
    results = []
    for step in parser.structure:
        kind, value = step["instruction"], step["value"]
        if kind == "COPY":
            *sources, dest = shlex.split(value)
            target = image_root / dest.lstrip("/")
            for src in sources:
                path = context / src
                if path.is_dir():
                    shutil.copytree(path, target, dirs_exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target if not dest.endswith("/") else target / path.name)  # modes kept, as COPY does
            results.append((step["content"].strip(), 0, ""))
        elif kind == "RUN":
            command = value.replace(f"PYTHONPATH={HOME}", f"PYTHONPATH={home}{os.pathsep}{extra_path}")
            command = command.replace(HOME, str(home)).replace("python3 ", f"{python} ")
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env.update(HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", TRANSFORMERS_VERBOSITY="error")
            proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=600)
            results.append((step["content"].strip(), proc.returncode, proc.stdout + proc.stderr))
            if proc.returncode != 0:
                break
    return results
