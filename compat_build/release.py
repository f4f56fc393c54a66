"""What the release workflow runs, one subcommand per step, and `check` to run them locally.

usage: python -m compat_build.release matrix
       python -m compat_build.release image CARD VERSION
       python -m compat_build.release validate CARD
       python -m compat_build.release selftest CARD VERSION [--report FILE]      (the release gate)
       python -m compat_build.release push CARD VERSION --tested FILE           (prints NAME@sha256:...)
       python -m compat_build.release register CARD IMAGE_REF [--tag VERSION]
       python -m compat_build.release summary CARD [--report FILE] [--ref REF] [--tag VERSION]
       python -m compat_build.release check [--local-bases]   (make release-check [BASES=local])

The image job is build -> selftest -> push -> register, as in jupyter/docker-stacks: the built
image runs its own self-test (common/build_checks/selftest.py: its entrypoint on the models bundled in it, vLLM
replaced by a recorder) the way the platform runs the image: `docker run --rm --user 54321:54321
--read-only --tmpfs /tmp --network none IMAGE selftest` (a uid the image does not know, a read-only
root, Docker's default tmpfs, which allows no exec); `push` pushes only the image that passed (the
same image id, read from the self-test's report) and prints the pushed digest; `register`
registers that digest, so the platform runs exactly what was tested.

Platform calls read MODELHUB_TOKEN (a CI secret) and MODELHUB_API (default: build_matrix.toml's
api_base). `check` runs every step of the workflow except push and register: manifest, task_info
files, rendering of every card, hadolint and COPY sources, shellcheck, actionlint, then the
platform's validate when MODELHUB_TOKEN is set, and a build and the self-test of every card when
a Docker daemon is reachable (on the vendor bases, or with --local-bases on their local stand-ins:
compat_build.local_bases); what it cannot do on this machine it says it skipped, and why.
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import manifest as manifest_mod
from . import lint, task_info
from .platform_client import PlatformClient, PlatformError

ROOT = manifest_mod.ROOT
# `matrix`, `image`, `validate`, `register` and `summary` run on a bare runner Python (standard
# library only); rendering, building and the Docker steps (jinja2, docker) import what they use.
BUILD_DIR = os.path.join(ROOT, "build")
CARD_LABEL = "io.enginex.card"  # set by the Dockerfile: which card an image was built for
SELFTEST_TIMEOUT_S = 1200  # two preflights with verification; a hung self-test fails the gate
# How the gate runs the image: as the platform does (docs/images-and-releases.md, "What an image needs from the
# platform"), at its strictest. Any uid: one no image knows. A read-only root with a tmpfs /tmp
# that allows no exec (Docker's default for --tmpfs): the preflight and the self-test need only a
# writable /tmp; exec there is the engine's need (its compiled kernel caches), not the gate's.
PLATFORM_USER = "54321:54321"
PLATFORM_TMPFS = {"/tmp": ""}  # "": Docker's defaults, rw,noexec,nosuid,nodev


class GateFailed(RuntimeError):
    """The built image may not be pushed or registered; the message says why."""


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


def split_ref(image_ref: str) -> Tuple[str, str, str]:
    """(repository, tag, digest) of `registry/name:tag`, `registry/name@sha256:...` or both;
    a missing part is "". A registry's port (`host:5000/name`) is not a tag."""
    name, _, digest = image_ref.partition("@")
    head, slash, last = name.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        return head + slash + last, tag, digest
    return name, "", digest


def register(manifest: manifest_mod.Manifest, card: str, image_ref: str, tag: str = "") -> None:
    """Register `image_ref` (in a release: the pushed digest, `name@sha256:...`); the platform's
    tag field gets `tag`, or the reference's own tag."""
    info = read_env_file(task_info.path_for(card))
    repository, ref_tag, _ = split_ref(image_ref)
    tag = tag or ref_tag
    if not tag:
        raise GateFailed(f"{image_ref} has no tag: pass --tag VERSION for the platform's tag field")
    server, repo = os.environ.get("GITHUB_SERVER_URL", ""), os.environ.get("GITHUB_REPOSITORY", "")
    _client(manifest).register(
        framework=info["FRAMEWORK"],
        gpu_type=info["GPU_TYPE"],
        task_type=info["TASK_TYPE"],
        image_url=image_ref,
        create_by=os.environ.get("GITHUB_ACTOR", "ci"),
        repo_url=f"{server}/{repo}" if server and repo else repository,
        tag=tag,
    )
    print(f"{card}: registered {image_ref} (tag {tag})")


def _docker():
    """The Docker SDK's client, or GateFailed saying why there is none."""
    from .build import BuildFailed, docker_client

    try:
        return docker_client()
    except BuildFailed as exc:
        raise GateFailed(str(exc)) from None


def _selftest_output(stdout: str) -> Optional[Dict[str, Any]]:
    """The self-test's JSON object from the container's stdout (anything printed before it, by a
    base image's shell profile for instance, is skipped)."""
    text = stdout.strip()
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and text[i + 1 : i + 2] == "{"]
    for start in starts:
        try:
            data = json.loads(text[start:])
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("checks"), list):
            return data
    return None


def selftest(client, card: str, image_ref: str, report_path: str = "", out=sys.stdout) -> Dict[str, Any]:
    """The release gate: `docker run --rm --user 54321:54321 --read-only --tmpfs /tmp --network none
    IMAGE selftest --card CARD --json`, the image's own entrypoint and Python on the models bundled
    in it, run as the platform runs the image. Prints a line per check and returns the report
    (written to `report_path` too, passed or not); raises GateFailed unless every check passed in
    an image labelled for `card`."""
    from docker.errors import DockerException

    from . import owner
    from .build import transport_errors

    api = client.api
    report: Dict[str, Any] = {
        "card": card,
        "image": image_ref,
        "image_id": None,
        "passed": False,
        "checks": [],
        "models": {},
        "runtime": {},
        "problem": "",
    }

    def done(problem: str = "") -> Dict[str, Any]:
        report["problem"] = problem
        report["passed"] = not problem
        if report_path:
            with open(report_path, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=1)
                fh.write("\n")
        if problem:
            raise GateFailed(f"{card}: {image_ref} failed its self-test: {problem}")
        return report

    container = None
    try:
        info = api.inspect_image(image_ref)
        report["image_id"] = info.get("Id")
        label = ((info.get("Config") or {}).get("Labels") or {}).get(CARD_LABEL)
        if label != card:
            return done(f"the image is labelled {CARD_LABEL}={label!r}, not {card!r}")
        host_config = api.create_host_config(network_mode="none", read_only=True, tmpfs=dict(PLATFORM_TMPFS))
        container = api.create_container(
            image_ref,
            command=["selftest", "--card", card, "--json"],
            user=PLATFORM_USER,
            host_config=host_config,
            labels=owner.labels(),
        )
        api.start(container)
        status = api.wait(container, timeout=SELFTEST_TIMEOUT_S).get("StatusCode")
        stdout = api.logs(container, stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = api.logs(container, stdout=False, stderr=True).decode("utf-8", "replace")
    except (DockerException, *transport_errors()) as exc:
        return done(f"the container could not be run ({_first_line(exc)})")
    finally:
        if container is not None:
            try:
                api.remove_container(container, force=True)
            except (DockerException, *transport_errors()):
                pass
    result = _selftest_output(stdout)
    if result is None:
        tail = " | ".join((stdout + stderr).strip().splitlines()[-12:]) or "no output"
        return done(f"exit {status} without a self-test report: {tail}")
    report["checks"], report["models"] = result["checks"], result.get("models") or {}
    report["runtime"] = result.get("runtime") or {}
    for check in result["checks"]:
        out.write(f"{'ok  ' if check.get('ok') else 'FAIL'} {card} selftest {check.get('name')}: {check.get('detail')}\n")
    out.flush()
    failed = [c.get("name") for c in result["checks"] if not c.get("ok")]
    if failed or status != 0 or not result.get("passed"):
        return done(f"exit {status}, failed checks: {', '.join(failed) or 'none reported'}")
    if result.get("card") != card:
        return done(f"the self-test ran as card {result.get('card')!r}")
    return done()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_report(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise GateFailed(f"no self-test report at {path} ({exc}): the self-test step must pass first") from None
    return data if isinstance(data, dict) else {}


def push(client, card: str, image_ref: str, tested: Dict[str, Any], out=sys.stderr) -> str:
    """Push `image_ref` if and only if it is the image that passed the self-test (`tested`: the
    gate's report); returns what to register: `repository@sha256:...` of the pushed manifest."""
    from docker.errors import DockerException

    from .build import transport_errors

    if manifest_mod.is_standin(image_ref):
        raise GateFailed(f"{card}: {image_ref} is built on a local stand-in of the vendor base; never pushed")
    if not tested.get("passed") or tested.get("card") != card or tested.get("image") != image_ref:
        raise GateFailed(f"{card}: {image_ref} has no passed self-test ({tested.get('problem') or 'no report for it'}); not pushed")
    repository, tag, _ = split_ref(image_ref)
    api = client.api
    digest = ""
    try:
        image_id = api.inspect_image(image_ref).get("Id")
        if not image_id or image_id != tested.get("image_id"):
            raise GateFailed(
                f"{card}: {image_ref} is now image {image_id}, not {tested.get('image_id')} that passed the self-test; not pushed"
            )
        for chunk in api.push(repository, tag=tag, stream=True, decode=True):
            if chunk.get("error"):
                raise GateFailed(f"{card}: push of {image_ref} failed: {chunk['error'].strip()}")
            status = chunk.get("status", "")
            if status and status not in ("Preparing", "Waiting", "Pushing"):
                out.write(f"{chunk.get('id') + ': ' if chunk.get('id') else ''}{status}\n")
            digest = (chunk.get("aux") or {}).get("Digest") or digest
        if not digest:  # a daemon that does not say it in the stream: what it recorded for the push
            digests = api.inspect_image(image_ref).get("RepoDigests") or []
            digest = next((d.split("@", 1)[1] for d in digests if d.startswith(repository + "@")), "")
    except (DockerException, *transport_errors()) as exc:
        raise GateFailed(f"{card}: push of {image_ref} failed ({_first_line(exc)})") from None
    if not digest.startswith("sha256:"):
        raise GateFailed(f"{card}: the registry did not report a digest for {image_ref}; not registered")
    out.flush()
    return f"{repository}@{digest}"


def summary(card: str, report: Optional[Dict[str, Any]], ref: str, tag: str) -> str:
    """Markdown for the job's step summary: card, what was registered, what the self-test saw."""
    lines = [f"### {card}", "", "| | |", "|---|---|"]
    lines.append(f"| registered | `{ref}` |" if ref else "| registered | nothing (the job stopped before) |")
    if tag:
        lines.append(f"| tag | `{tag}` |")
    if report is None:
        lines.append("| self-test | did not run |")
        return "\n".join(lines) + "\n"
    checks = report.get("checks") or []
    passed = sum(1 for c in checks if c.get("ok"))
    verdict = "passed" if report.get("passed") else f"FAILED: {report.get('problem') or 'see the log'}"
    lines.append(f"| self-test | {verdict} ({passed}/{len(checks)} checks) |")
    if report.get("image_id"):
        lines.append(f"| tested image id | `{report['image_id']}` |")
    run = report.get("runtime") or {}
    if run:
        ro = "read-only root" if run.get("read_only_root") else "writable root"
        tmp = "/tmp without exec" if run.get("tmp_noexec") else "/tmp with exec"
        lines.append(f"| self-test ran as | uid {run.get('uid')}, {ro}, {tmp} |")
    for model, seen in sorted((report.get("models") or {}).items()):
        repairs = ", ".join(seen.get("repairs") or []) or "none"
        lines.append(f"| repairs for {model} | {repairs} |")
    failed = [c for c in checks if not c.get("ok")]
    if failed:
        lines += ["", "Failed checks:", ""] + [f"- `{c.get('name')}`: {c.get('detail')}" for c in failed]
    return "\n".join(lines) + "\n"


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


def check(out_dir: str, local_bases: bool = False) -> int:
    from .render import render_card

    failures: List[str] = []
    skipped: List[str] = []

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
            result = subprocess.run(
                [hadolint, "--failure-threshold", "error", os.path.join(context, "Dockerfile")], capture_output=True, text=True
            )
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
        skipped.append("platform validate")
    from .build import BuildFailed, build_card, docker_client

    try:
        client = docker_client()
    except BuildFailed as exc:
        print(f"skip docker build and self-test (the release gate, `docker run --rm IMAGE selftest`): {exc}")
        skipped.append("docker build and self-test (no Docker daemon)")
    else:
        args: Dict[str, Dict[str, str]] = {name: {} for name in manifest_mod.card_names(manifest)}
        if local_bases:  # no vendor registry here: each card on the local stand-in of its base
            from .local_bases import BaseError, card_bases

            try:
                args = {card: {"BASE_IMAGE": base} for card, base in card_bases(out=sys.stdout).items()}
            except BaseError as exc:
                step("local bases", False, str(exc))
                args = {}
        for name in args:
            # On the local bases the images are stand-ins, named apart from the release's.
            version = "release-check"
            tag = manifest_mod.standin_ref(manifest, name, version) if local_bases else manifest_mod.image_ref(manifest, name, version)
            try:
                build_card(client, manifest.cards[name], tag, args[name])
                step(f"{name}: docker build", True)
            except BuildFailed as exc:
                step(f"{name}: docker build", False, str(exc))
                continue
            try:
                selftest(client, name, tag)
                step(f"{name}: selftest", True, f"docker run --rm --user {PLATFORM_USER} --read-only --tmpfs /tmp {tag} selftest")
            except GateFailed as exc:
                step(f"{name}: selftest", False, str(exc))
    verdict = (
        f"FAILED: {', '.join(failures)}"
        if failures
        else (f"the steps run here passed; NOT run here: {', '.join(skipped)}" if skipped else "all steps passed")
    )
    print(f"release-check: {verdict}")
    return 1 if failures else 0


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="release workflow steps")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("matrix", help="print the cards as a JSON list")
    i = sub.add_parser("image", help="print the card's image reference for a version")
    i.add_argument("card")
    i.add_argument("version")
    e = sub.add_parser("task-info", help="print the card's task_info.env (FRAMEWORK, GPU_TYPE, TASK_TYPE) lines")
    e.add_argument("card")
    v = sub.add_parser("validate", help="ask the platform whether it accepts the card's GPU_TYPE/TASK_TYPE")
    v.add_argument("card")
    t = sub.add_parser("selftest", help="the release gate: run the built image's self-test in a container")
    t.add_argument("card")
    t.add_argument("version")
    t.add_argument("--report", default="", help="write the gate's report here (the push step reads it)")
    p = sub.add_parser("push", help="push the image that passed the self-test; print NAME@sha256:DIGEST")
    p.add_argument("card")
    p.add_argument("version")
    p.add_argument("--tested", required=True, metavar="REPORT", help="the self-test step's --report file")
    r = sub.add_parser("register", help="register a pushed image with the platform")
    r.add_argument("card")
    r.add_argument("image_ref", help="in a release: the pushed digest, NAME@sha256:...")
    r.add_argument("--tag", default="", help="the platform's tag field (default: the reference's tag)")
    m = sub.add_parser("summary", help="markdown for the job summary: card, registered digest, self-test repairs")
    m.add_argument("card")
    m.add_argument("--report", default="")
    m.add_argument("--ref", default="")
    m.add_argument("--tag", default="")
    c = sub.add_parser("check", help="every workflow step except push and register, locally")
    c.add_argument("--out", default=BUILD_DIR)
    c.add_argument(
        "--local-bases", action="store_true", help="build on the local stand-ins of the vendor bases (make base-images), not the vendor's"
    )
    opts = parser.parse_args(list(argv) if argv is not None else None)
    try:
        manifest = manifest_mod.load()
        if opts.command == "matrix":
            print(json.dumps(manifest_mod.card_names(manifest)))
        elif opts.command == "image":
            print(manifest_mod.image_ref(manifest, manifest_mod.select_card(manifest, opts.card), opts.version))
        elif opts.command == "task-info":  # a variant's file is cards/<card>/task_info@<variant>.env
            info = read_env_file(task_info.path_for(manifest_mod.select_card(manifest, opts.card)))
            print("".join(f"{key}={value}\n" for key, value in info.items()), end="")
        elif opts.command == "validate":
            validate(manifest, manifest_mod.select_card(manifest, opts.card))
        elif opts.command == "register":
            register(manifest, manifest_mod.select_card(manifest, opts.card), opts.image_ref, opts.tag)
        elif opts.command == "selftest":
            card = manifest_mod.select_card(manifest, opts.card)
            selftest(_docker(), card, manifest_mod.image_ref(manifest, card, opts.version), opts.report)
            print(f"{card}: self-test passed")
        elif opts.command == "push":
            card = manifest_mod.select_card(manifest, opts.card)
            print(push(_docker(), card, manifest_mod.image_ref(manifest, card, opts.version), read_report(opts.tested)))
        elif opts.command == "summary":
            report = read_report(opts.report) if opts.report and os.path.exists(opts.report) else None
            print(summary(opts.card, report, opts.ref, opts.tag), end="")
        else:
            return check(opts.out, opts.local_bases)
    except (manifest_mod.ManifestError, PlatformError, GateFailed, OSError) as exc:
        print(f"release {opts.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
