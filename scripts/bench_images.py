"""make bench-images: what the images cost, each figure measured side by side in one run on the
local stand-in bases (a Docker daemon at DOCKER_HOST; `make bench-images` starts one if needed).

image_added_mb_<card>                       what the compat layers add over the card's base image
                                            (goal <= 10)
image_rebuild_after_runtime_change_vs_full  one file of common/ changed: the rebuild (only the runtime
                                            layers run again) / a build of every compat layer
                                            without the cache (goal <= 0.2)
container_ready_compat_vs_disabled          a clean model on nv-a100, container start until
                                            /v1/models answers 200, through the preflight /
                                            with COMPAT_DISABLE=1 (goal <= 1.05; the median of
                                            interleaved starts)

usage: python scripts/bench_images.py [--starts N]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import bench_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat_build import images as images_mod  # noqa: E402
from compat_build import manifest, owner  # noqa: E402
from compat_build.build import docker_client  # noqa: E402
from compat_build.render import render_card  # noqa: E402
from harness.fixtures.factory import build as build_model  # noqa: E402
from harness.containers import platform_run_kwargs  # noqa: E402
from harness.ports import free_port  # noqa: E402

RUNTIME_FILE = Path("runtime") / "common" / "start" / "log.py"  # any file of the runtime package
READY_TIMEOUT_S = 300


def timed_build(client, context: str, tag: str, base: str, nocache: bool) -> float:
    start = time.monotonic()
    for chunk in client.api.build(path=context, tag=tag, buildargs={"BASE_IMAGE": base}, nocache=nocache, rm=True, decode=True):
        if "error" in chunk:
            raise SystemExit(f"bench-images: build failed: {chunk['error']}")
    return time.monotonic() - start


def rebuild_ratio(client, card: manifest.Card, base: str) -> float:
    """A build of every compat layer with no cache, then the same context with one runtime file
    changed: the second reuses every layer before the runtime package."""
    with tempfile.TemporaryDirectory() as tmp:
        context = render_card(card, tmp)
        tag = "enginex-compat/bench-rebuild:latest"
        full = timed_build(client, context, tag, base, nocache=True)
        with open(Path(context) / RUNTIME_FILE, "a", encoding="utf-8") as fh:
            fh.write(f"\n# bench-images {time.time_ns()}\n")
        rebuild = timed_build(client, context, tag, base, nocache=False)
        client.images.remove(tag, force=True)
    return rebuild / full


def ready_seconds(client, tag: str, model: Path, env: dict) -> float:
    port = free_port()
    run = platform_run_kwargs(model, env)
    start = time.monotonic()
    argv = ["--max-model-len", "256", "--port", str(port), "--host", "127.0.0.1"]
    container = client.containers.run(tag, argv, detach=True, labels=owner.labels(), **run)  # a killed bench's: swept by make test
    try:
        while time.monotonic() - start < READY_TIMEOUT_S:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as answer:
                    if answer.status == 200:
                        return time.monotonic() - start
            except OSError:
                container.reload()
                if container.status == "exited":
                    raise SystemExit(f"bench-images: the container exited before serving: {container.logs()[-2000:]!r}")
            time.sleep(0.25)
        raise SystemExit("bench-images: the container did not serve in time")
    finally:
        container.remove(force=True)


def main() -> bench_cli.Figures:
    parser = bench_cli.parser(__doc__)
    parser.add_argument("--starts", type=int, default=3, help="container starts of each kind (interleaved)")
    opts = parser.parse_args()
    client = docker_client()
    m = manifest.load()
    built = images_mod.build_all(log=open(os.devnull, "w"))
    for card, image in built.items():
        added = client.images.get(image["tag"]).attrs["Size"] - client.images.get(image["base"]).attrs["Size"]
        bench_cli.report({f"image_added_mb_{card}": f"{added / 1e6:.2f}"})
    card = "nv-a100"
    bench_cli.report({"image_rebuild_after_runtime_change_vs_full": f"{rebuild_ratio(client, m.cards[card], built[card]['base']):.2f}"})
    models = Path(tempfile.mkdtemp(prefix="bench-images-"))
    try:
        model = build_model("457", "generic", models / "clean")
        for path in [models, *models.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        compat, disabled = [], []
        for _ in range(opts.starts):
            compat.append(ready_seconds(client, built[card]["tag"], model, {}))
            disabled.append(ready_seconds(client, built[card]["tag"], model, {"COMPAT_DISABLE": "1"}))
    finally:
        shutil.rmtree(models, ignore_errors=True)
    return {
        "container_ready_compat_s": f"{statistics.median(compat):.1f}",
        "container_ready_disabled_s": f"{statistics.median(disabled):.1f}",
        "container_ready_compat_vs_disabled": f"{statistics.median(compat) / statistics.median(disabled):.3f}",
    }


if __name__ == "__main__":
    bench_cli.run(main)
