"""Build card images with the Docker SDK: `python -m compat_build.build CARD|all [--version V] [--revision R]`.

Renders the card's context first (compat_build.render, into a directory of the build's own),
builds it with the manifest's base image (override: --base-image or BASE_IMAGE), streams the
build's progress, and tags it per the manifest (`[release] image` + version). The revision label is --revision, else REVISION, else the
checkout's commit (`git rev-parse HEAD`; "unknown" outside a git checkout). A base the daemon
already has is used as it is (made locally, or `docker load`ed from a vendor's tarball, as vendor
images reach an air-gapped cluster); only a missing one is pulled. Expected failures end in one
sentence, never a traceback: no Docker daemon, a base image that cannot be pulled (named as asked
for), a failing step (its log shown). `all` builds every card even when one fails, then prints a
summary line per card; the exit status is 1 when any failed.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Dict, Iterable, List, Optional

from . import manifest as manifest_mod
from .render import render_card, select

LOG_TAIL = 30


class BuildFailed(RuntimeError):
    """One sentence for the user; the caller prints it and exits 1."""


def docker_client():
    """A client for the local daemon, or BuildFailed that says what to do instead."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise BuildFailed("the docker Python package is missing: run `make venv` first")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        return client
    except DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "the default socket")
        raise BuildFailed(
            f"no Docker daemon is reachable at {host} ({_first_line(exc)}); start Docker or build on a "
            "machine that has it (`make render` and `make lint` work without one)"
        )


def transport_errors() -> tuple:
    """What talking to a daemon can raise besides its own answers: requests' errors, and urllib3's
    where the SDK reads a streamed answer (a build's or a push's log) from the raw response, as
    when the daemon dies in the middle of one."""
    from requests.exceptions import RequestException
    from urllib3.exceptions import HTTPError

    return (RequestException, HTTPError)


def revision() -> str:
    """The checkout's commit, what the images' org.opencontainers.image.revision label names."""
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=manifest_mod.ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def build_card(client, card: manifest_mod.Card, tag: str, buildargs: Dict[str, str], out=sys.stdout) -> str:
    """Render the card's context and build it; returns the image id. Streams progress to `out`.
    Each build renders into a directory of its own: two builds of one card at once (a release
    beside a test, two test workers) never tar a context the other is rewriting."""
    with tempfile.TemporaryDirectory(prefix=f"enginex-compat-{card.name}-") as tmp:
        return _build(client, card, render_card(card, tmp), tag, buildargs, out)


def _build(client, card: manifest_mod.Card, context: str, tag: str, buildargs: Dict[str, str], out) -> str:
    from docker.errors import APIError

    base = buildargs.get("BASE_IMAGE") or card.base_image
    log: List[str] = []
    step = ""
    try:
        stream = client.api.build(path=context, tag=tag, buildargs=buildargs, pull=False, rm=True, forcerm=True, decode=True)
        image_id = None
        for chunk in stream:
            if "stream" in chunk:
                text = chunk["stream"]
                if text.startswith("Step "):
                    step = text.strip()
                log.append(text)
                out.write(text)
                out.flush()
            elif "status" in chunk and chunk.get("status", "").startswith(("Pulling from", "Digest", "Status")):
                out.write(f"{chunk['status']} {chunk.get('id', '')}\n")
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                raise BuildFailed(_explain(card, base, chunk["error"], step, log))
    except APIError as exc:
        raise BuildFailed(_explain(card, base, exc.explanation or str(exc), step, log))
    except (*transport_errors(), ValueError) as exc:
        raise BuildFailed(f"{card.name}: the Docker daemon's answer could not be read ({_first_line(exc)}); last step: {step or 'none'}")
    if image_id is None:
        raise BuildFailed(f"{card.name}: the daemon ended the build without an image; log above")
    return image_id


def _explain(card: manifest_mod.Card, base: str, error: str, step: str, log: List[str]) -> str:
    error = error.strip()
    lowered = error.lower()
    if any(
        s in lowered
        for s in (
            "pull access denied",
            "manifest unknown",
            "not found: manifest",
            "failed to resolve",
            "repository does not exist",
            "no such host",
            "unauthorized",
            "connection refused",
            "dial tcp",
        )
    ) and (not step or ": FROM " in step):
        return f"{card.name}: the base image {base} is not on this daemon and cannot be pulled ({error}); log in to its registry, `docker load` it, or pass --base-image"
    tail = "".join(log[-LOG_TAIL:]).rstrip()
    return f"{card.name}: build step failed: {step or 'before the first step'}: {error}\n--- last lines of the step's log ---\n{tail}"


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="build card images with the Docker SDK")
    parser.add_argument("card", help="a card of build_matrix.toml, or all")
    parser.add_argument("--version", default=os.environ.get("VERSION", "dev"))
    parser.add_argument("--revision", default=os.environ.get("REVISION", ""), help="default: the checkout's commit")
    parser.add_argument("--base-image", default=os.environ.get("BASE_IMAGE", ""))
    opts = parser.parse_args(list(argv) if argv is not None else None)
    try:
        manifest = manifest_mod.load()
        cards = select(manifest, opts.card)
        client = docker_client()
    except (BuildFailed, manifest_mod.ManifestError) as exc:
        print(f"build: {exc}", file=sys.stderr)
        return 1
    args = {"VERSION": opts.version, "REVISION": opts.revision or revision()}
    if opts.base_image:
        args["BASE_IMAGE"] = opts.base_image
    results: List[str] = []
    failed = 0
    for card in cards:
        tag = manifest_mod.image_ref(manifest, card.name, opts.version)
        print(f"building {card.name} -> {tag}", flush=True)
        try:
            image_id = build_card(client, card, tag, args)
        except BuildFailed as exc:
            # One card's failure does not stop the others: the summary says which failed and why.
            print(f"build: {exc}", file=sys.stderr, flush=True)
            why = str(exc).splitlines()[0]
            results.append(f"FAIL {card.name}: {why[len(card.name) + 2 :] if why.startswith(card.name + ': ') else why}")
            failed += 1
            continue
        print(f"built {tag}", flush=True)
        results.append(f"ok   {card.name}: {tag} ({image_id[:19]})")
    if len(cards) > 1:
        print(f"build: {len(cards) - failed} of {len(cards)} cards built (revision {args['REVISION']})")
        for line in results:
            print(f"  {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
