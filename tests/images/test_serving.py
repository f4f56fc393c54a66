"""Models served from inside the images, the way the platform runs them: the model read-only at
/model, a uid the image does not know, a read-only root with a tmpfs for the work dir, host
networking, the platform's `vllm serve` arguments after the image name.

A model saved by transformers 5 is served with its author's greedy tokens through each image's
own entrypoint (the preflight's repairs), and fails the way the vanilla engine does with
COMPAT_DISABLE=1; a clean model gets exactly `vllm serve /model ARGS` and the environment the
container was given (red line 3), checked on the process vLLM runs as.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from common.build_checks.selftest import SHELL_VARS
from common.triage import triage_file
from compat_build import manifest
from harness.cores import cpu_set
from harness.engine import ENGINES, COMMON_ENV
from harness.fixtures.factory import author_record
from tests.images.cards import backport_cards, serving_cards, transformers5_repairs, vanilla_refusing_cards
from tests.images.conftest import IMAGE_HOME, NEWEST_FAMILIES
from harness.containers import platform_run_kwargs
from harness.ports import free_port

# The platform's arguments in these runs: a small context for the CPU engines, float32 for the
# greedy proof (the author's reference comes from transformers' generate in float32), and what
# each engine generation needs to hand back token ids (0.5.5 only by a server flag).
GREEDY_ARGS = {"0.5.5": ["--return-tokens-as-token-ids"]}
# A model vanilla vLLM of each generation refuses, saved by transformers 5: what it says.
VANILLA_REFUSAL = "Tokenizer class TokenizersBackend does not exist or is not currently imported."


def triaged(tmp_path, log: str) -> str:
    path = tmp_path / "container.log"
    path.write_text(log)
    return triage_file(str(path)).code


def engine_of(card: str):
    return ENGINES[manifest.load().cards[card].vllm]


def platform_args(card: str, port: int) -> list:
    engine = engine_of(card)
    return [*engine.serve_args_for(port), "--dtype", "float32", *GREEDY_ARGS.get(engine.version, [])]


def start(containers, images, card: str, model, name: str, env=None):
    """The image built here (a given one's engine is the vendor's, which this CPU cannot run)."""
    port = free_port()
    tag = images.built_here(card)["tag"]
    container = containers.run(name, tag, platform_args(card, port), port, **platform_run_kwargs(model, env))
    return container, port


# In a container: "no seed" where the image baked no inspections; else the number of them, after
# checking that the start's vLLM cache holds them byte for byte, the model's class ($1) among them.
SEEDED_CACHE = f"""
seed={IMAGE_HOME}/vllm-cache/modelinfos
[ -d "$seed" ] || {{ echo "no seed"; exit 0; }}
cache=${{VLLM_CACHE_ROOT:-${{XDG_CACHE_HOME:-$HOME/.cache}}/vllm}}/modelinfos
ls "$cache" | grep -q -- "-$1.json$" || {{ echo "no entry of $1 in $cache"; exit 1; }}
diff -r "$seed" "$cache" && ls "$seed" | wc -l
"""


# One card per engine generation (tests/images/cards.py): a model served shows the engine.
@pytest.mark.parametrize("card", serving_cards())
def test_a_transformers5_model_is_served_with_its_authors_greedy_tokens(images, containers, image_models, card, tmp_path):
    model = image_models("v5-greedy")
    author = author_record(model)
    before = {p.name: p.stat().st_mtime_ns for p in model.iterdir()}
    srv, _ = start(containers, images, card, model, "served")
    assert srv.wait_ready(), srv.log()[-4000:]
    status, listed = srv.get("/v1/models")
    assert status == 200 and [m["id"] for m in listed["data"]] == ["/model"], listed
    status, body = srv.chat("/model")
    assert status == 200 and body["choices"][0]["message"]["role"] == "assistant", body
    status, body = srv.complete("/model")
    assert status == 200 and body["choices"][0]["text"], body
    ids_in_request = engine_of(card).version != "0.5.5"
    got = srv.greedy_tokens("/model", author["reference_prompt"], len(author["reference_tokens"]), ids_in_request)
    assert got == author["reference_tokens"]
    log = srv.log()
    assert "[compat] exec vllm serve /model" in log
    # The engine ran on this worker's cores, not beside the other worker's engines (containers.py).
    status, text = srv.exec("grep", "Cpus_allowed_list", "/proc/1/status")
    assert status == 0 and cpu_set(text.split(":")[1]) == os.sched_getaffinity(0), text
    assert triaged(tmp_path, log) == "unknown", log[-3000:]  # a healthy start is claimed by no rule
    # The root is read-only and /model too: the plan's report is in the tmpfs work dir, and the
    # model is as it was.
    status, text = srv.exec("sh", "-c", "cat /tmp/compat-*/report.json")
    report = json.loads(text)
    assert status == 0 and report["card"] == card and report["model_dir"] == "/model"
    assert {r["code"] for r in report["repairs"]} == transformers5_repairs(card)
    assert {p.name: p.stat().st_mtime_ns for p in model.iterdir()} == before
    # vLLM's model-class inspections, baked at the build, were in this start's cache before vLLM
    # started, and vLLM used them as they were (an entry it finds stale it inspects and writes
    # again); vLLM 0.5.5 keeps none, and its image none to put there.
    architecture = json.loads((model / "config.json").read_text())["architectures"][0]
    status, text = srv.exec("sh", "-c", SEEDED_CACHE, "sh", architecture)
    if engine_of(card).version == "0.5.5":
        assert status == 0 and text.strip() == "no seed", text
    else:
        assert status == 0 and int(text.strip()) > 100, text


# Each family in one of the 0.11 cards' images, each card with one: their images register the same
# backports (common/), and the conformance cells prove both families on both cards.
@pytest.mark.parametrize("card,family", list(zip(backport_cards("0.11.0"), NEWEST_FAMILIES, strict=True)))
def test_the_newest_families_are_served_through_the_images_backports(images, containers, image_models, card, family):
    """A tiny Qwen3.5 and a tiny Gemma 4, saved by their author's transformers 5: the image's
    plugin registers the backport written for its engine's generation (vLLM 0.11 lacks both
    classes), and the container serves the author's greedy tokens."""
    model = image_models(family)
    author = author_record(model)
    architecture = json.loads((model / "config.json").read_text())["architectures"][0]
    srv, _ = start(containers, images, card, model, f"served-{family}")
    assert srv.wait_ready(), srv.log()[-4000:]
    got = srv.greedy_tokens("/model", author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]
    log = srv.log()
    assert f"compat_weights: registered the backport of {architecture}" in log, log[-3000:]
    status, text = srv.exec("sh", "-c", "cat /tmp/compat-*/report.json")
    report = json.loads(text)
    assert status == 0 and "R10" in {r["code"] for r in report["repairs"]}, report


@pytest.mark.parametrize("card", vanilla_refusing_cards())
def test_compat_disable_fails_the_way_the_vanilla_engine_does(images, containers, image_models, card, tmp_path):
    """Never ready, the engine's own refusal in the log. (vLLM 0.5.5's server logs that its engine
    process died and exits 0: the status says nothing there, so neither does this test.)"""
    srv, _ = start(containers, images, card, image_models("v5-greedy"), "disabled", {"COMPAT_DISABLE": "1"})
    assert srv.wait_ready() is False
    srv.wait_exit()
    log = srv.log()
    assert "[compat] COMPAT_DISABLE=1: starting vLLM untouched" in log and VANILLA_REFUSAL in log
    assert triaged(tmp_path, log) == "R3b"


@pytest.mark.parametrize("card", ["nv-a100"])
def test_a_clean_model_gets_exactly_vllm_serve_model_args(images, containers, image_models, card):
    """Saved by the engine's own transformers: the process the container runs is `vllm serve
    /model` with the platform's arguments and nothing else, in the environment it was given."""
    srv, port = start(containers, images, card, image_models("457-generic"), "clean")
    assert srv.wait_ready(), srv.log()[-4000:]
    status, cmdline = srv.exec("cat", "/proc/1/cmdline")
    argv = cmdline.rstrip("\0").split("\0")
    assert status == 0 and argv[argv.index("serve") - 1].endswith("/vllm")
    assert argv[argv.index("serve") :] == ["serve", "/model", *platform_args(card, port)]
    status, environ = srv.exec("cat", "/proc/1/environ")
    # What the process sees, less what the entrypoint's bash maintains itself and the HOSTNAME
    # Docker gives every container; the rest is the image's and the platform's, untouched.
    seen = dict(item.split("=", 1) for item in environ.rstrip("\0").split("\0"))
    seen = {k: v for k, v in seen.items() if k not in SHELL_VARS | {"HOSTNAME"}}
    given = dict(item.split("=", 1) for item in srv.container.attrs["Config"]["Env"])
    assert seen == given and not any(key.startswith("COMPAT_") for key in seen)
    assert {k: seen[k] for k in COMMON_ENV} == COMMON_ENV
    assert "[compat] no repairs needed" in srv.log()


@pytest.mark.parametrize("card", ["nv-a100@next"])
def test_too_little_shared_memory_is_triaged_with_its_fix(images, containers, image_models, tmp_path, card):
    """Docker's default /dev/shm (64 MB) is too small for the newest CPU engine's processes: the
    start fails, and triage names the class and the platform's fix instead of `unknown`."""
    port = free_port()
    run = dict(platform_run_kwargs(image_models("457-generic")), shm_size="64m")
    srv = containers.run("small-shm", images.built_here(card)["tag"], platform_args(card, port), port, **run)
    assert srv.wait_ready() is False
    log = srv.log()
    assert "Insufficient space in /dev/shm" in log
    assert triaged(tmp_path, log) == "SHM"


def failed_start(srv, failure: str, timeout: float = 240) -> str:
    """The log of a start that failed: the container exited, or the engine logged `failure` (after
    a failed start the newest engine's API server can hang in its shutdown, its engine core dead:
    the platform sees a start that never answers either way), and /health never answered 200."""
    deadline = time.monotonic() + timeout
    while srv.running() and failure not in srv.log():
        assert time.monotonic() < deadline, f"neither an exit nor {failure!r} in {timeout:g}s:\n{srv.log()[-3000:]}"
        time.sleep(0.5)
    try:
        status = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/health", timeout=5).status
    except (urllib.error.URLError, OSError):
        status = None
    assert status != 200, "the engine logged its failure and still answers /health"
    return srv.log()


@pytest.mark.parametrize("card", ["nv-a100@next"])
def test_a_noexec_tmp_fails_the_engines_compiled_kernels_and_is_triaged_with_its_fix(images, containers, image_models, tmp_path, card):
    """Why the platform's /tmp must allow exec (docs/images-and-releases.md, "What an image needs from the platform"):
    on Docker's default tmpfs, the newest CPU engine compiles the model with torch's inductor (no
    --enforce-eager) into its cache under HOME=/tmp and cannot load what it wrote. The start
    fails; the launcher said why before it, and triage names NOEXEC with the fix."""
    port = free_port()
    args = ["--max-model-len", "256", "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32"]
    run = dict(platform_run_kwargs(image_models("457-generic")), tmpfs={"/tmp": ""})
    srv = containers.run("noexec", images.built_here(card)["tag"], args, port, **run)
    log = failed_start(srv, "failed to map segment from shared object")
    assert "failed to map segment from shared object" in log, log[-3000:]
    assert "[compat] /tmp is on a noexec mount" in log
    assert triaged(tmp_path, log) == "NOEXEC"
