"""The image tier (`pytest -m images`): the card images built by a real Docker daemon on the local
stand-in bases, and run as the platform runs them.

Every test here is marked `images`. Without a daemon (`make test` starts one when none answers:
scripts/with-docker.sh) the tier skips, saying why; under CI (CI=true) it fails instead, so a
CI run can never pass without having built and run the images.

The cards are build_matrix.toml's (every card and variant): a card added there is tested here.
`--image CARD=REF` (repeatable) tests a given image as CARD's instead of building one, a
vendor-based `make build` image before its push for instance: only the given cards' tests run, and
those that need an image built here on its local base skip, saying so.
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional

import pytest

from compat_build import manifest
from harness.containers import TrackedContainers
from harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# Every image of a release: the cards' default engines and their variants, from the matrix.
CARDS = manifest.card_names(manifest.load())
IMAGE_HOME = "/opt/enginex-compat"  # where the Dockerfile puts the runtime package and its steps
BASE_NAME_LABEL = "org.opencontainers.image.base.name"


def given_images(config) -> Dict[str, str]:
    """card -> image reference, from --image CARD=REF."""
    given: Dict[str, str] = {}
    for value in config.getoption("--image") or []:
        card, sep, ref = value.partition("=")
        if not sep or not ref:
            raise pytest.UsageError(f"--image {value!r}: give it as CARD=REF")
        if card not in CARDS:
            raise pytest.UsageError(f"--image {value!r}: {card!r} is not a card of build_matrix.toml ({', '.join(CARDS)})")
        given[card] = ref
    return given


def item_card(item) -> Optional[str]:
    """The card a test is about: its `card` parameter, or its module's CARD."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "card" in callspec.params:
        return callspec.params["card"]
    return getattr(item.module, "CARD", None)


def pytest_collection_modifyitems(config, items):
    given = given_images(config)
    kept, dropped = [], []
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.images)
            if given and item_card(item) not in given:
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:  # --image: the tier is about the given images alone
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the image tier cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():
    """The daemon at DOCKER_HOST (or the default socket)."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        _unavailable("the docker Python package is missing: run `make venv`")
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as exc:
        _unavailable(f"no Docker daemon answers ({str(exc).splitlines()[0]}): run the tier through `make test` or scripts/with-docker.sh")
    yield client
    client.close()


class BuiltImages:
    """card -> {"tag", "id", "base", "given"}: each image built on first use (or found up to date in
    the daemon's build cache) by compat_build.images, the code path of `make images` (a run of one
    card's tests builds that card alone), or the one --image gave for the card. A build that
    failed is tried once per session: the tests that need it fail at once with its reason."""

    def __init__(self, client, given: Dict[str, str]) -> None:
        self.client = client
        self.given = given
        self.built: Dict[str, Dict[str, str]] = {}
        self.failed: Dict[str, str] = {}

    def __getitem__(self, card: str) -> Dict[str, str]:
        if card in self.failed:
            pytest.fail(f"the {card} image could not be built (tried once this session): {self.failed[card]}", pytrace=False)
        if card not in self.built:
            if card in self.given:
                self.built[card] = self._given(card, self.given[card])
            else:
                self._build(card)
        return self.built[card]

    def _build(self, card: str) -> None:
        from compat_build import images as images_mod
        from compat_build.build import BuildFailed
        from compat_build.local_bases import BaseError

        log = io.StringIO()  # the build's progress; its tail is in BuildFailed's message
        try:
            self.built.update(images_mod.build_all([card], log=log))
        except (BuildFailed, BaseError) as exc:
            self.failed[card] = str(exc)
            pytest.fail(f"the {card} image could not be built: {exc}", pytrace=False)

    def _given(self, card: str, ref: str) -> Dict[str, str]:
        from docker.errors import ImageNotFound

        try:
            image = self.client.images.get(ref)
        except ImageNotFound:
            self.failed[card] = f"--image {card}={ref}: the daemon has no such image (docker load or pull it first)"
            pytest.fail(self.failed[card], pytrace=False)
        return {"tag": ref, "id": image.id, "base": (image.labels or {}).get(BASE_NAME_LABEL, ""), "given": "yes"}

    def built_here(self, card: str) -> Dict[str, str]:
        """The card's image where it was built here on its local base; a test that needs that (the
        CPU engine serving, the committed profile, a build on the same base) skips for a given one."""
        image = self[card]
        if image.get("given"):
            pytest.skip(f"{card}: {image['tag']} was given (--image); this test needs the image built here on the local base")
        return image


@pytest.fixture(scope="session")
def images(docker_client, request) -> BuiltImages:
    return BuiltImages(docker_client, given_images(request.config))


@pytest.fixture
def containers(docker_client, tmp_path):
    """Start containers by name (`containers.run(name, image, command, ...)`); all are removed
    after the test, their logs kept in tmp_path/<name>.log. Each carries this session's owner
    label: a killed session's are swept by the next `make test` (compat_build.prune)."""
    tracked = TrackedContainers(docker_client, tmp_path)
    yield tracked
    tracked.remove_all()


@pytest.fixture(scope="session")
def registry_binary() -> str:
    """Debian's docker-registry, installed where it is missing (scripts/apt-install.sh)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        subprocess.run([str(ROOT / "scripts" / "apt-install.sh"), "docker-registry"], check=False)
        binary = shutil.which("docker-registry")
    if binary is None:
        _unavailable("docker-registry is not installed (Debian's docker-registry package)")
    return binary


@pytest.fixture(scope="session")
def registry(tmp_path_factory, registry_binary):
    """A real registry (Debian's docker-registry, distribution 2.x) on 127.0.0.1: its address.
    Its blobs stay in the cache between runs, like the daemon's layers: a push compresses every
    layer it sends (about 2 minutes for a 3 GB engine base here), and a registry that already
    holds the base takes only the compat layers. Each run pushes its own tags; `make test` and
    `make docker-prune` keep each repository's newest and collect the blobs only older ones
    referenced (compat_build.prune), never while a session holds the storage's lock, as this one
    does while it serves."""
    from compat_build.prune import registry_lock, registry_storage

    binary = registry_binary
    root = tmp_path_factory.mktemp("registry")
    storage = registry_storage()
    os.makedirs(storage, exist_ok=True)
    lock = open(registry_lock(), "a")
    fcntl.flock(lock, fcntl.LOCK_SH)
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    log = open(root / "registry.log", "w")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    import time
    import urllib.request

    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=1) as answer:
                if answer.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        lock.close()
        pytest.fail(f"the registry did not answer on {address}: {(root / 'registry.log').read_text()[-2000:]}")
    yield address
    proc.terminate()
    proc.wait(timeout=30)
    log.close()
    lock.close()


@pytest.fixture(scope="session")
def image_models(tmp_path_factory):
    """Models made by code for the containers, readable by the platform's uid (the container runs
    as a user that owns nothing on this machine)."""
    from harness.fixtures.factory import build

    base = Path(tempfile.mkdtemp(prefix="image-models-"))
    os.chmod(base, 0o755)
    made: Dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            if name == "v5-greedy":  # transformers 5's save, with the author's greedy tokens
                made[name] = build("v5", "generic", base / name, "--initializer-range", "0.1", "--reference-tokens", "16")
            elif name == "457-generic":  # saved by the nv-a100 engine's transformers: nothing to repair
                made[name] = build("457", "generic", base / name)
            else:
                raise KeyError(name)
            for directory, _, files in os.walk(made[name]):
                os.chmod(directory, 0o755)
                for file in files:
                    os.chmod(os.path.join(directory, file), 0o644)
        return made[name]

    yield get
    shutil.rmtree(base, ignore_errors=True)


def in_image(containers, tag: str, name: str, *argv: str, env=None) -> str:
    """stdout of argv run in a fresh container of the image, its entrypoint bypassed (as root,
    without network, the image's build-step files on PYTHONPATH)."""
    status, out, err = containers.run_to_end(
        name, tag, list(argv[1:]), entrypoint=[argv[0]], network_mode="none", user="root", environment=env or {}
    )
    assert status == 0, out + err
    return out


def python_module(*args: str, env=None) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` of this checkout, as the workflow's steps run them."""
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", *args], cwd=str(ROOT), env=full, capture_output=True, text=True, timeout=1800)
