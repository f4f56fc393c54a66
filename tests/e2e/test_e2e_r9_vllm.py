"""R9 on the real engines: a LLaVA whose CLIP vision tower transformers 5 saved without its
`vision_model.` level (build_vlm.py --keep-v5-weight-names: `vision_tower.embeddings.*`).

1. The launcher on nv-a100 with R9 turned off (COMPAT_SKIP=R9: every other repair of this
   transformers-5 LLaVA is there, so the start shows what the weight names alone do): vLLM 0.11.0
   dies loading the tower with `KeyError: 'embeddings.class_embedding'`, and `triage` on that log
   says R9 (one start, ~20 s).
2. The full launcher plans R9; the engine loads the image's plugin from the repair's PYTHONPATH,
   which renames the tower's weights, serves the greedy tokens of transformers 5's own `generate`
   on the same weights and answers an image chat (one start, ~30 s).
3. On each engine generation (0.5.5, 0.11.0, 0.32.0), without a server: with the repair's
   environment the engine's own `load_general_plugins()` wraps its weight iterator, which then
   yields exactly the tensors (names, shapes, bytes) of the same model in the published layout.
   No LLaVA is served on 0.5.5 (its CPU venv lacks vllm_flash_attn) or 0.32 (one start of 0.11
   shows the repair); their loaders look the flat names up the same way (read from their source,
   see the rule's doc).
"""

import base64
import json
import subprocess

import pytest

from common.rules.support.plugin import PLUGIN_DIR
from common.triage import triage_file
from harness.engine import ENGINE_0110, ENGINES, free_port, launch_report
from harness.fixtures.factory import author_record, build_vlm
from tests.e2e.test_e2e_r8_vllm import PROBE, original_tensors

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE_0110.available(), reason=ENGINE_0110.missing_reason),
]

GREEDY = ["--dtype", "float32"]  # the reference tokens come from transformers 5's generate in float32
SEED_ARGS = ("--initializer-range", "0.1")
TOWER_TENSORS = 39  # build_vlm.py's 2-layer CLIP tower: 3 embeddings, 2 x 16 per layer, 2 + 2 norms


@pytest.fixture(scope="module")
def llavas(tmp_path_factory):
    """The same seeded weights saved twice by transformers 5: its own flat tower names, and renamed
    to the published layout (build_vlm.py's default)."""
    base = tmp_path_factory.mktemp("r9")
    flat = build_vlm(base / "flat", *SEED_ARGS, "--keep-v5-weight-names", "--reference-tokens", "16", "--png", str(base / "image.png"))
    published = build_vlm(base / "published", *SEED_ARGS)
    return flat, published, base / "image.png"


def test_the_fixture_has_transformers5s_flat_tower_names(llavas):
    flat, published, _ = llavas
    assert author_record(flat)["vision_weights_renamed"] == 0
    assert author_record(published)["vision_weights_renamed"] == TOWER_TENSORS


def test_vllm_0_11_dies_on_the_flat_tower_and_triage_says_r9(llavas, server, tmp_path):
    flat, _, _ = llavas
    env = ENGINE_0110.launcher_env(flat, "nv-a100", tmp_path / "work", {"COMPAT_SKIP": "R9"})
    srv = server(ENGINE_0110.launcher_argv(free_port()) + GREEDY, env, "no-r9")
    assert srv.wait_ready() is False and srv.wait_exit() != 0
    assert "R9" not in [r["code"] for r in launch_report(tmp_path / "work")["repairs"]]
    assert "KeyError: 'embeddings.class_embedding'" in srv.log()
    assert triage_file(str(srv.log_path)).code == "R9"


def test_launcher_serves_the_flat_tower_with_transformers5_greedy_tokens(llavas, launched, tmp_path):
    flat, _, image = llavas
    author = author_record(flat)
    srv, plan = launched(ENGINE_0110, "nv-a100", flat, tmp_path / "work", *GREEDY)
    [r9] = [r for r in plan["repairs"] if r["code"] == "R9"]
    assert r9["verified"] is True and plan["env"]["COMPAT_WEIGHT_NAMES"] == "vision_model"
    assert plan["env"]["PYTHONPATH"].split(":")[0] == PLUGIN_DIR
    log = srv.log()
    assert (
        "compat_weights: vllm.model_executor.model_loader.default_loader.DefaultModelLoader wraps the weights (weight_names=vision_model)"
        in log
    )
    assert f"compat_weights: renamed {TOWER_TENSORS} vision tower weights to the published layout (scheme vision_model)" in log
    got = srv.greedy_tokens(str(flat), author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]
    # The renamed tower is the one that runs: an image request goes through it.
    status, body = srv.image_chat(str(flat), "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode(), "what is this?")
    assert status == 200 and body["usage"]["prompt_tokens"] > 16, body


@pytest.mark.parametrize("version", sorted(ENGINES))
def test_each_engines_weight_iterator_yields_the_published_names(llavas, tmp_path, version):
    engine = ENGINES[version]
    if not engine.available():
        pytest.skip(engine.missing_reason)
    flat, published, _ = llavas
    out = tmp_path / "probe.json"
    env = engine.env({"PYTHONPATH": PLUGIN_DIR, "COMPAT_WEIGHT_NAMES": "vision_model"})
    proc = subprocess.run([str(engine.python), str(PROBE), str(flat), str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    probe = json.loads(out.read_text())
    assert probe["wrapped"] == {"weight_names": "vision_model"}  # the engine's own plugin loading found and ran it
    assert probe["tensors"] == original_tensors(published)
