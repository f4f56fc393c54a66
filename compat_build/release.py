"""What the release workflow runs, one subcommand per step, and `check` to run them locally.

usage: python -m compat_build.release matrix
       python -m compat_build.release image CARD VERSION
       python -m compat_build.release validate CARD
       python -m compat_build.release register CARD IMAGE_REF
       python -m compat_build.release check          (make release-check)

Platform calls read MODELHUB_TOKEN (a CI secret) and MODELHUB_API (default: build_matrix.toml's
api_base). `check` runs every step of the workflow except push and register: manifest, task_info
files, rendering of every card, hadolint and COPY sources, shellcheck, actionlint, then the
platform's validate when MODELHUB_TOKEN is set and a build when a Docker daemon is reachable;
what it cannot do on this machine it says it skipped, and why.
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, Iterable, List, Optional

from . import manifest as manifest_mod
from . import lint, task_info
from .platform_client import PlatformClient, PlatformError

ROOT = manifest_mod.ROOT
# `matrix`, `image`, `validate` and `register` run on a bare runner Python (standard library
# only); rendering and building (jinja2, docker) are imported where they are used.
BUILD_DIR = os.path.join(ROOT, "build")


def read_env_file(path: str) -> Dict[str, str]:
    values = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                values[key.strip()] = value.strip()
    return values


def _client(manifest: manifest_mod.Manifest) -> PlatformClient:
    api = os.environ.get("MODELHUB_API") or manifest.release["api_base"]
    return PlatformClient(api, token=os.environ.get("MODELHUB_TOKEN") or None)


def validate(manifest: manifest_mod.Manifest, card: str) -> None:
    info = read_env_file(task_info.path_for(card))
    _client(manifest).validate(info["GPU_TYPE"], info["TASK_TYPE"])
    print(f"{card}: the platform accepts gpuType={info['GPU_TYPE']} taskType={info['TASK_TYPE']}")


def register(manifest: manifest_mod.Manifest, card: str, image_ref: str) -> None:
    info = read_env_file(task_info.path_for(card))
    repository, _, tag = image_ref.rpartition(":")
    server, repo = os.environ.get("GITHUB_SERVER_URL", ""), os.environ.get("GITHUB_REPOSITORY", "")
    _client(manifest).register(
        framework=info["FRAMEWORK"], gpu_type=info["GPU_TYPE"], task_type=info["TASK_TYPE"], image_url=image_ref,
        create_by=os.environ.get("GITHUB_ACTOR", "ci"), repo_url=f"{server}/{repo}" if server and repo else repository,
        tag=tag)
    print(f"{card}: registered {image_ref}")


def copy_sources_missing(context: str) -> List[str]:
    """COPY/ADD sources of the context's Dockerfile that do not exist in the context."""
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(path=os.path.join(context, "Dockerfile"))
    missing = []
    for instruction in parser.structure:
        if instruction["instruction"] in ("COPY", "ADD"):
            parts = [p for p in instruction["value"].split() if not p.startswith("--")]
            for src in parts[:-1]:
                if not os.path.exists(os.path.join(context, src)):
                    missing.append(f"{instruction['instruction']} {src} (line {instruction['startline'] + 1})")
    return missing


def check(out_dir: str) -> int:
    from .render import render_card

    failures: List[str] = []

    def step(name: str, ok: bool, detail: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(name)

    manifest = manifest_mod.load()
    step("build_matrix.toml", True, f"{len(manifest.cards)} cards")
    stale = task_info.stale_cards(manifest)
    step("task_info.env agree with the manifest", not stale, ", ".join(stale) + " stale: run `make render`" if stale else "")
    hadolint = lint.tool("hadolint")
    for name in manifest_mod.card_names(manifest):
        context = render_card(manifest.cards[name], out_dir)
        missing = copy_sources_missing(context)
        step(f"{name}: COPY sources exist", not missing, "; ".join(missing))
        if hadolint:
            result = subprocess.run([hadolint, "--failure-threshold", "error", os.path.join(context, "Dockerfile")],
                                    capture_output=True, text=True)
            step(f"{name}: hadolint", result.returncode == 0, (result.stdout + result.stderr).strip())
        else:
            step(f"{name}: hadolint", False, "hadolint not found: run `make venv`")
    for name in ("shellcheck", "actionlint"):
        ok, output = lint.run(name)
        step(name, ok, output)
    if os.environ.get("MODELHUB_TOKEN"):
        for name in manifest_mod.card_names(manifest):
            try:
                validate(manifest, name)
                step(f"{name}: platform validate", True)
            except PlatformError as exc:
                step(f"{name}: platform validate", False, str(exc))
    else:
        print("skip platform validate: MODELHUB_TOKEN is not set")
    from .build import BuildFailed, build_card, docker_client

    try:
        client = docker_client()
    except BuildFailed as exc:
        print(f"skip docker build: {exc}")
    else:
        for name in manifest_mod.card_names(manifest):
            try:
                build_card(client, manifest.cards[name], manifest_mod.image_ref(manifest, name, "release-check"), {})
                step(f"{name}: docker build", True)
            except BuildFailed as exc:
                step(f"{name}: docker build", False, str(exc))
    print(f"release-check: {'FAILED: ' + ', '.join(failures) if failures else 'all steps passed'}")
    return 1 if failures else 0


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="release workflow steps")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("matrix", help="print the cards as a JSON list")
    i = sub.add_parser("image", help="print the card's image reference for a version")
    i.add_argument("card")
    i.add_argument("version")
    v = sub.add_parser("validate", help="ask the platform whether it accepts the card's GPU_TYPE/TASK_TYPE")
    v.add_argument("card")
    r = sub.add_parser("register", help="register a pushed image with the platform")
    r.add_argument("card")
    r.add_argument("image_ref")
    c = sub.add_parser("check", help="every workflow step except push and register, locally")
    c.add_argument("--out", default=BUILD_DIR)
    opts = parser.parse_args(list(argv) if argv is not None else None)
    try:
        manifest = manifest_mod.load()
        if opts.command == "matrix":
            print(json.dumps(manifest_mod.card_names(manifest)))
        elif opts.command == "image":
            print(manifest_mod.image_ref(manifest, manifest_mod.select_card(manifest, opts.card), opts.version))
        elif opts.command == "validate":
            validate(manifest, manifest_mod.select_card(manifest, opts.card))
        elif opts.command == "register":
            register(manifest, manifest_mod.select_card(manifest, opts.card), opts.image_ref)
        else:
            return check(opts.out)
    except (manifest_mod.ManifestError, PlatformError, OSError) as exc:
        print(f"release {opts.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
