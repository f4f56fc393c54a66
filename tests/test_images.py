"""Card images: rendered build contexts, their steps run against real site-packages trees, the
task_info files, `make build` through the real docker SDK, the release workflow, release check."""

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from common.patching import BACKUP_SUFFIX
from compat_build import manifest, release, render, task_info
from compat_build.patches.l1_special_tokens_list import MARKER as L1_MARKER
from tests.docker_api import DockerAPI
from tests.dockerfile_steps import HOME, run_steps
from tests.ports import free_port
from tests.test_library_patches import ENGINE, VENVS, shadow_package

ROOT = Path(__file__).resolve().parents[1]
# Every image of a release: the cards' default engines and their variants.
CARDS = ["hygon-k100", "iluvatar-bi100", "nv-a100", "nv-a100@next"]
WORKFLOW = ROOT / ".gitea" / "workflows" / "docker-build-push.yml"
TEST_WORKFLOW = ROOT / ".gitea" / "workflows" / "test.yml"
BIN = Path(sys.executable).parent


def rendered(tmp_path, card):
    return Path(render.render_card(manifest.load().cards[card], str(tmp_path)))


def tree(path: Path):
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mode) for p in sorted(path.rglob("*")) if p.is_file()}


def test_rendering_is_deterministic(tmp_path):
    for card in CARDS:
        first, second = rendered(tmp_path / "a", card), rendered(tmp_path / "b", card)
        assert tree(first) == tree(second)


@pytest.mark.parametrize("card", CARDS)
def test_rendered_context_is_complete_and_lint_clean(tmp_path, card):
    entry = manifest.load().cards[card]
    ctx = rendered(tmp_path, card)
    text = (ctx / "Dockerfile").read_text()
    assert text.startswith("# Rendered by `make render`")
    assert f"ARG BASE_IMAGE={entry.base_image}\nFROM ${{BASE_IMAGE}}\n" in text
    for label in (
        'org.opencontainers.image.version="${VERSION}"',
        'org.opencontainers.image.revision="${REVISION}"',
        f'io.enginex.card="{card}"',
        f'io.enginex.vllm-version="{entry.vllm}"',
    ):
        assert label in text
    assert text.rstrip().endswith(f'ENTRYPOINT ["{HOME}/entrypoint.sh"]')
    # Rarely-changing layers first: every patch and the profile step come before the runtime package.
    lines = text.splitlines()
    runtime_at = lines.index(f"COPY runtime/common/ {HOME}/common/")
    assert all(i < runtime_at for i, line in enumerate(lines) if "image_steps" in line)
    for code in entry.build_patches:
        assert (code in text) if code != "L3" else ("install_patched_ops" in text)
    from compat_build.release import copy_sources_missing

    assert copy_sources_missing(str(ctx)) == []
    runtime = ctx / "runtime" / "common"
    assert (runtime / "launch.py").is_file() and (runtime / "rules" / "r2_chat_template.py").is_file()
    assert not (runtime / "tests").exists() and not list((runtime / "profiles").glob("*.json"))
    assert filecmp.cmp(ctx / "entrypoint.sh", ROOT / "common" / "entrypoint.sh", shallow=False)
    # The self-test's models: the committed fixtures, byte for byte, copied into the image.
    for model in render.SELFTEST_MODELS:
        assert not filecmp.dircmp(ctx / "selftest" / "models" / model, ROOT / "tests" / "fixtures" / "models" / model).diff_files
        assert (ctx / "selftest" / "models" / model / "config.json").is_file()
    assert f"COPY selftest/ {HOME}/selftest/" in lines
    assert os.access(ctx / "entrypoint.sh", os.X_OK)
    lint = subprocess.run([str(BIN / "hadolint"), "--failure-threshold", "error", str(ctx / "Dockerfile")], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def profile_of(image_root: Path, card: str):
    home = image_root / HOME.lstrip("/")
    return json.loads((home / "common" / "profiles" / f"{card}.json").read_text()), (
        home / "common" / "profiles" / "IMAGE_CARD"
    ).read_text().strip()


def assert_steps_passed(results):
    failed = [(line, out) for line, rc, out in results if rc != 0]
    assert not failed, failed


def nv_a100_image(tmp_path):
    """The nv-a100 Dockerfile's steps run on the vLLM 0.11.0 engine venv; (results, image home)."""
    ctx = rendered(tmp_path / "build", "nv-a100")
    shadow_package(ENGINE, "vllm", "v1/attention/backends/triton_attn.py", tmp_path / "site")
    results = run_steps(ctx, tmp_path / "image", str(ENGINE / "bin" / "python"), str(tmp_path / "site"))
    return results, tmp_path / "image" / HOME.lstrip("/")


def test_nv_a100_steps_on_the_real_vllm_0_11_engine(tmp_path):
    """L2's check on the real triton_attn.py, and the profile baked from the engine itself equals
    the committed one (which `make profiles` made from the same packages)."""
    results, _ = nv_a100_image(tmp_path)
    assert_steps_passed(results)
    assert any("L2 check passed:" in out for _, _, out in results)
    profile, image_card = profile_of(tmp_path / "image", "nv-a100")
    assert image_card == "nv-a100"
    assert profile == json.loads((ROOT / "common" / "profiles" / "nv-a100.json").read_text())


def test_the_built_layout_starts_a_model_through_its_entrypoint(tmp_path, models, fake_vllm):
    """The image's own files: entrypoint.sh -> bootstrap -> launcher with the baked profile (no
    COMPAT_CARD: the image's card), repairs, then exec vLLM with the platform's arguments."""
    results, home = nv_a100_image(tmp_path)
    assert_steps_passed(results)
    script, called = fake_vllm
    model = models("v5-qwen2")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_") and k != "PYTHONPATH"}
    env.update(
        PATH=f"{script.parent}{os.pathsep}{env['PATH']}",
        MODEL_DIR=str(model),
        COMPAT_HOME=str(home),
        COMPAT_PYTHON=str(ENGINE / "bin" / "python"),
        COMPAT_WORK_DIR=str(tmp_path / "work"),
    )
    proc = subprocess.run(["bash", str(home / "entrypoint.sh"), "--port", "8000"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    argv = called()["argv"]
    assert argv[1:4] == ["serve", str(model), "--tokenizer"] and argv[-2:] == ["--port", "8000"]
    [report] = (tmp_path / "work").glob("run-*/report.json")
    assert json.loads(report.read_text())["card"] == "nv-a100"
    assert "PYTHONPATH" not in called()["env"]


def test_hygon_steps_patch_the_real_transformers_4_57(tmp_path):
    ctx = rendered(tmp_path / "build", "hygon-k100")
    target = shadow_package(ENGINE, "transformers", "tokenization_utils_base.py", tmp_path / "site")
    shadow_package(ENGINE, "vllm", "v1/attention/backends/triton_attn.py", tmp_path / "site")
    results = run_steps(ctx, tmp_path / "image", str(ENGINE / "bin" / "python"), str(tmp_path / "site"))
    assert_steps_passed(results)
    assert L1_MARKER in target.read_text() and Path(str(target) + BACKUP_SUFFIX).exists()
    profile, _ = profile_of(tmp_path / "image", "hygon-k100")
    assert profile["engine"]["architectures"] and profile["attention"]["head_size_policy"] == "flash-attn-pa-env"


ENGINE055 = ROOT / ".venv-engine055"


@pytest.mark.skipif(not (ENGINE055 / "bin" / "python").exists(), reason="needs .venv-engine055: run `make engine055-env`")
def test_iluvatar_steps_on_the_real_vllm_0_5_5_engine_and_a_vendor_tree(tmp_path):
    """L1 on the engine's transformers 4.55.4, L3 into an ixformer tree, and the profile baked
    from the engine itself equals the committed one (which `make profiles` made from it)."""
    ctx = rendered(tmp_path / "build", "iluvatar-bi100")
    site = tmp_path / "site"
    target = shadow_package(ENGINE055, "transformers", "tokenization_utils_base.py", site)
    functions = site / "ixformer" / "functions"
    functions.mkdir(parents=True)
    (site / "ixformer" / "__init__.py").write_text("")
    (functions / "__init__.py").write_text("")
    results = run_steps(ctx, tmp_path / "image", str(ENGINE055 / "bin" / "python"), str(site))
    assert_steps_passed(results)
    assert L1_MARKER in target.read_text()
    assert (functions / "gelu_tanh_and_mul.py").is_file()
    assert "from .gelu_tanh_and_mul import *" in (functions / "__init__.py").read_text()
    profile, image_card = profile_of(tmp_path / "image", "iluvatar-bi100")
    assert image_card == "iluvatar-bi100"
    committed = json.loads((ROOT / "common" / "profiles" / "iluvatar-bi100.json").read_text())
    # The one difference is L1's doing, and the profile says so: the image's transformers reads a
    # list of extra_special_tokens (the repo's profile is made from the unpatched engine).
    assert committed["engine"]["reads"]["extra_special_tokens_list"] is False
    assert profile["engine"]["reads"].pop("extra_special_tokens_list") is True
    committed["engine"]["reads"].pop("extra_special_tokens_list")
    assert profile == committed


def test_a_profile_baked_without_vllm_never_invents_its_facts(tmp_path):
    """Baked where no vLLM is installed (transformers alone: the dev venv's 4.57): the engine facts are unknown."""
    from compat_build.image_steps.bake_profile import profile_json
    from compat_build.profiles import card_json, take_snapshot

    snap = take_snapshot(str(VENVS["4.57"] / "bin" / "python"))
    profile = profile_json(card_json(manifest.load().cards["iluvatar-bi100"]), snap)
    engine = profile["engine"]
    assert engine["architectures"] is None and engine["engine_args"] is None and engine["quantization_methods"] is None
    assert engine["transformers_backend"] is None and engine["head_dim_none_fallback"] is None
    assert engine["serve_config_file"] is None and engine["reads"]["rope_parameters"] is False


def test_a_failing_patch_step_stops_the_build(tmp_path):
    """A required patch on a library without its anchor (transformers 5) fails its RUN step."""
    ctx = rendered(tmp_path / "build", "hygon-k100")
    shadow_package(VENVS["5"], "transformers", "tokenization_utils_base.py", tmp_path / "site")
    results = run_steps(ctx, tmp_path / "image", str(VENVS["5"] / "bin" / "python"), str(tmp_path / "site"))
    line, rc, out = results[-1]
    assert rc == 1 and "apply_patches" in line and "L1 FAILED" in out and "anchor missing" in out


def test_task_info_files_agree_with_the_manifest(tmp_path):
    m = manifest.load()
    for card in CARDS:
        text = Path(task_info.path_for(card)).read_text()
        assert text == task_info.task_info(m, card)
        values = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
        framework = "vllm_compat_next" if card.endswith("@next") else "vllm_compat"
        assert values == {"FRAMEWORK": framework, "GPU_TYPE": m.cards[card].gpu_type, "TASK_TYPE": "text-generation"}
        result = python_module("compat_build.release", "task-info", card)  # what the workflow loads
        assert result.returncode == 0 and result.stdout == "".join(f"{k}={v}\n" for k, v in values.items())
    assert "GPU_TYPE=Iluvatar_bi-100" in (ROOT / "cards" / "iluvatar-bi100" / "task_info.env").read_text()
    assert "GPU_TYPE=hygon_k100-ai" in (ROOT / "cards" / "hygon-k100" / "task_info.env").read_text()


def test_task_info_disagreement_is_caught(tmp_path):
    m = manifest.load()
    for card in CARDS:
        path = Path(task_info.path_for(card, str(tmp_path)))
        path.parent.mkdir(exist_ok=True)
        path.write_text(task_info.task_info(m, card))
    assert task_info.stale_cards(m, str(tmp_path)) == []
    edited = tmp_path / "nv-a100" / "task_info.env"
    edited.write_text(edited.read_text().replace("GPU_TYPE=nvidia_a100", "GPU_TYPE=A100"))
    (tmp_path / "hygon-k100" / "task_info.env").unlink()
    assert task_info.stale_cards(m, str(tmp_path)) == ["hygon-k100", "nv-a100"]


def python_module(*args, env=None):
    env = dict(os.environ, **(env or {}))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([sys.executable, "-m", *args], cwd=str(ROOT), capture_output=True, text=True, env=env, timeout=600)


def test_build_without_a_daemon_says_so_in_one_sentence():
    result = python_module("compat_build.build", "nv-a100", env={"DOCKER_HOST": f"tcp://127.0.0.1:{free_port()}"})
    assert result.returncode == 1
    assert result.stderr.startswith("build: no Docker daemon is reachable at tcp://127.0.0.1:")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_build_unknown_card_names_the_known_ones():
    result = python_module("compat_build.build", "mystery-x1")
    assert result.returncode == 1 and "unknown card 'mystery-x1'" in result.stderr and "nv-a100" in result.stderr


def build_with(chunks, *args):
    api = DockerAPI(chunks)
    try:
        result = python_module("compat_build.build", *args, env={"DOCKER_HOST": api.url})
    finally:
        api.close()
    return result, api.builds


def test_build_streams_tags_and_sends_the_rendered_context():
    chunks = [
        {"stream": "Step 1/12 : ARG BASE_IMAGE=x\n"},
        {"stream": " ---> abc\n"},
        {"aux": {"ID": "sha256:feed"}},
        {"stream": "Successfully built feed\n"},
    ]
    result, builds = build_with(chunks, "iluvatar-bi100", "--version", "v1.2.3", "--revision", "abc123")
    assert result.returncode == 0, result.stderr
    assert "Step 1/12 : ARG BASE_IMAGE=x" in result.stdout
    assert "built harbor.4pd.io/enginex-compat/vllm-compat-iluvatar-bi100:v1.2.3" in result.stdout
    [build] = builds
    assert build["query"]["t"] == "harbor.4pd.io/enginex-compat/vllm-compat-iluvatar-bi100:v1.2.3"
    assert json.loads(build["query"]["buildargs"]) == {"VERSION": "v1.2.3", "REVISION": "abc123"}
    assert "Dockerfile" in build["names"] and "patches/ixformer_ops/gelu_tanh_and_mul.py" in build["names"]
    assert "runtime/common/launch.py" in build["names"]
    assert "FROM ${BASE_IMAGE}" in build["dockerfile"]


def test_build_base_image_override():
    result, builds = build_with([{"aux": {"ID": "sha256:1"}}], "nv-a100", "--base-image", "local/vllm:test")
    assert result.returncode == 0 and json.loads(builds[0]["query"]["buildargs"])["BASE_IMAGE"] == "local/vllm:test"


def test_failing_step_shows_its_log_without_a_traceback():
    chunks = [
        {"stream": "Step 1/12 : ARG BASE_IMAGE=x\n"},
        {"stream": "Step 6/12 : RUN PYTHONPATH=/opt/enginex-compat python3 -m compat_build.image_steps.apply_patches L1\n"},
        {"stream": "L1 FAILED: transformers.tokenization_utils_base: anchor missing\n"},
        {"error": "The command '/bin/sh -c ...' returned a non-zero code: 1"},
    ]
    result, _ = build_with(chunks, "hygon-k100")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "hygon-k100: build step failed: Step 6/12" in result.stderr
    assert "L1 FAILED: transformers.tokenization_utils_base: anchor missing" in result.stderr


def test_unpullable_base_image_is_named():
    chunks = [
        {"stream": "Step 1/12 : ARG BASE_IMAGE=x\n"},
        {"stream": "Step 2/12 : FROM ${BASE_IMAGE}\n"},
        {"error": "pull access denied for harbor.4pd.io/dooke/vllm/vllm/vllm-openai, repository does not exist"},
    ]
    result, _ = build_with(chunks, "nv-a100")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "the base image harbor.4pd.io/dooke/vllm/vllm/vllm-openai:v0.11.0 is not on this daemon and cannot be pulled" in result.stderr


def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def test_workflow_builds_every_card_on_v_tags_with_secrets_only():
    flow = workflow()
    assert flow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    matrix_job, image_job = flow["jobs"]["matrix"], flow["jobs"]["image"]
    assert "compat_build.release matrix" in json.dumps(matrix_job)
    assert image_job["strategy"]["fail-fast"] is False
    assert image_job["strategy"]["matrix"]["card"] == "${{ fromJSON(needs.matrix.outputs.cards) }}"
    steps = " ".join(json.dumps(s) for s in image_job["steps"])
    order = [
        "task_info.env",
        "release validate",
        "docker login",
        "compat_build.build",
        "release selftest",
        "release push",
        "release register",
        "release summary",
    ]
    positions = [steps.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "https://modelhub.org.cn" in flow["env"]["MODELHUB_API"]
    text = WORKFLOW.read_text()
    credentials = re.findall(r"(\w*(?:TOKEN|PASSWORD|USERNAME)\w*):", text)
    assert set(credentials) == {"MODELHUB_TOKEN", "REGISTRY_USERNAME", "REGISTRY_PASSWORD"}
    for name in credentials:
        assert re.search(rf"{name}: \$\{{\{{ secrets\.{name} \}}\}}", text), name


def test_workflow_gates_the_push_on_the_selftest_and_registers_the_pushed_digest():
    """build -> selftest -> push -> register: the push and the registration run only when every
    step before them passed (no `if:` of their own), the push takes the self-test's report and
    the registration the push's digest; the summary is written whatever happened."""
    steps = workflow()["jobs"]["image"]["steps"]
    runs = [s.get("run", "") for s in steps]

    def at(marker):
        [i] = [i for i, run in enumerate(runs) if marker in run]
        return i

    build, gate, push, register, summary = (
        at("compat_build.build"),
        at("release selftest"),
        at("release push"),
        at("release register"),
        at("release summary"),
    )
    assert build < gate < push < register < summary
    assert all("if" not in steps[i] for i in range(summary))  # a failed step stops everything up to the summary
    assert '--report "$RUNNER_TEMP/selftest.json"' in runs[gate]
    assert '--tested "$RUNNER_TEMP/selftest.json"' in runs[push] and steps[push]["id"] == "push"
    assert 'echo "ref=$ref" >> "$GITHUB_OUTPUT"' in runs[push]
    assert steps[register]["env"]["IMAGE_REF"] == "${{ steps.push.outputs.ref }}"
    assert '"$IMAGE_REF" --tag "$VERSION"' in runs[register]
    assert steps[summary]["if"] == "${{ !cancelled() }}" and '>> "$GITHUB_STEP_SUMMARY"' in runs[summary]
    assert not any("docker push" in run for run in runs)  # the push is the gate's: only a tested image
    install = next(run for run in runs if "envs/release/requirements.txt" in run)
    assert "--require-hashes" in install


def test_test_workflow_lints_and_runs_the_unit_tier_on_every_push_and_pull_request():
    flow = yaml.safe_load(TEST_WORKFLOW.read_text())
    assert set(flow[True]) == {"push", "pull_request"} and not flow[True]["push"]  # every branch and tag
    [job] = flow["jobs"].values()
    runs = [s.get("run", "") for s in job["steps"]]
    venv, lint, unit = (next(i for i, r in enumerate(runs) if m in r) for m in ("make venv", "make lint", "pytest common/"))
    assert venv < lint and venv < unit
    assert runs[unit].startswith(".venv/bin/python -m pytest")


def test_matrix_output_lists_the_manifest_cards():
    result = python_module("compat_build.release", "matrix")
    assert json.loads(result.stdout) == CARDS


def test_workflow_steps_before_install_need_only_the_standard_library():
    """The matrix job installs nothing: its step must run on a bare Python (-S: no site-packages)."""
    for args in (["matrix"], ["image", "nv-a100", "v1.0.0"]):
        result = subprocess.run(
            [sys.executable, "-S", "-m", "compat_build.release", *args], cwd=str(ROOT), capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr


def test_release_check_runs_every_local_step():
    result = python_module(
        "compat_build.release",
        "check",
        "--out",
        str(ROOT / "build" / "release-check"),
        env={"DOCKER_HOST": f"tcp://127.0.0.1:{free_port()}", "MODELHUB_TOKEN": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for card in CARDS:
        assert f"ok   {card}: hadolint" in result.stdout and f"ok   {card}: COPY sources exist" in result.stdout
    assert "ok   actionlint" in result.stdout and "ok   shellcheck" in result.stdout
    assert "skip platform validate: MODELHUB_TOKEN is not set" in result.stdout
    assert "skip docker build and self-test (the release gate, `docker run --rm IMAGE selftest`): no Docker daemon" in (result.stdout)
    assert result.stdout.rstrip().endswith(
        "release-check: the steps run here passed; NOT run here: platform validate, docker build and self-test (no Docker daemon)"
    )


def test_release_validate_and_register_against_a_local_platform(platform):
    """The workflow's validate and register steps, end to end against the scripted platform."""
    from tests.conftest import TOKEN

    api = platform["client"].api_base
    env = {
        "MODELHUB_API": api,
        "MODELHUB_TOKEN": TOKEN,
        "GITHUB_ACTOR": "ci-bot",
        "GITHUB_SERVER_URL": "https://git.example",
        "GITHUB_REPOSITORY": "team/enginex-compat",
    }
    ok = python_module("compat_build.release", "validate", "hygon-k100", env=env)
    assert ok.returncode == 0, ok.stderr
    assert platform["requests"][0][1] == "/adminApi/image-verify/validate?gpuType=hygon_k100-ai&taskType=text-generation"
    ref = "harbor.4pd.io/enginex-compat/vllm-compat-hygon-k100:v1.0.0"
    reg = python_module("compat_build.release", "register", "hygon-k100", ref, env=env)
    assert reg.returncode == 0, reg.stderr
    assert json.loads(platform["requests"][1][3]) == {
        "framework": "vllm_compat",
        "gpuType": "hygon_k100-ai",
        "imageUrl": ref,
        "taskType": "text-generation",
        "createBy": "ci-bot",
        "repoUrl": "https://git.example/team/enginex-compat",
        "tag": "v1.0.0",
    }
    platform["script"] = [(200, {"code": 0, "data": False})]
    refused = python_module("compat_build.release", "validate", "nv-a100", env=env)
    assert refused.returncode == 1 and "does not accept gpuType='nvidia_a100'" in refused.stderr
    assert "Traceback" not in refused.stderr
    for result in (ok, reg, refused):
        assert TOKEN not in result.stdout + result.stderr


# The release gate: build -> selftest -> push -> register, driven through the real docker SDK
# against the Docker API stand-in, whose containers are a built layout's own entrypoint.

VERSION = "v9.9.9"
REF = manifest.image_ref(manifest.load(), "nv-a100", VERSION)
REPOSITORY = REF.rsplit(":", 1)[0]
IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "d" * 64
PUSHED = [
    {"status": f"The push refers to repository [{REPOSITORY}]"},
    {"status": "Preparing", "progressDetail": {}, "id": "5f70bf18a086"},
    {"status": "Pushed", "progressDetail": {}, "id": "5f70bf18a086"},
    {"status": f"{VERSION}: digest: {DIGEST} size: 1234"},
    {"progressDetail": {}, "aux": {"Tag": VERSION, "Digest": DIGEST, "Size": 1234}},
]


@pytest.fixture(scope="module")
def built_nv_a100(tmp_path_factory):
    """The nv-a100 image's files (its Dockerfile's steps on the real vLLM 0.11.0 engine venv),
    made once; tests that break it work on a copy."""
    results, home = nv_a100_image(tmp_path_factory.mktemp("nv-a100-image"))
    assert_steps_passed(results)
    return home


def image_copy(home: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "image" / HOME.lstrip("/")
    shutil.copytree(home, dest, symlinks=True)
    return dest


def container_runner(home: Path):
    """`docker run IMAGE CMD...` of the layout: its ENTRYPOINT exec'd (as the exec form is) with
    the command, on the image's Python (the engine venv's), with nothing of this checkout around."""

    def run(image, command):
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "MODEL_DIR")}
        env.update(COMPAT_HOME=str(home), COMPAT_PYTHON=str(ENGINE / "bin" / "python"), HF_HUB_OFFLINE="1")
        proc = subprocess.run([str(home / "entrypoint.sh"), *command], env=env, capture_output=True, cwd="/", timeout=900)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def docker_with(home: Path, label: str = "nv-a100") -> DockerAPI:
    return DockerAPI(
        [], runner=container_runner(home), push_chunks=PUSHED, images={REF: {"Id": IMAGE_ID, "Labels": {"io.enginex.card": label}}}
    )


def release_step(api: DockerAPI, *args):
    return python_module("compat_build.release", *args, env={"DOCKER_HOST": api.url})


def test_users_run_the_selftest_with_the_images_entrypoint(built_nv_a100):
    """`docker run --rm IMAGE selftest`: one line per check, exit 0."""
    rc, out, err = container_runner(built_nv_a100)(REF, ["selftest"])
    lines = out.decode().splitlines()
    assert rc == 0, out.decode() + err.decode()
    assert [line.split(":")[0] for line in lines] == [
        "ok   python",
        "ok   import",
        "ok   profile",
        "ok   v5-generic",
        "ok   457-generic",
        "ok   models",
        "selftest",
    ]
    assert lines[2].startswith("ok   profile: nv-a100: vLLM 0.11.0, transformers 4.57.6")
    assert lines[-1] == "selftest: passed (6/6 checks)"


def test_release_gate_then_push_and_register_the_tested_digest(built_nv_a100, tmp_path, platform):
    from tests.conftest import TOKEN

    api = docker_with(built_nv_a100)
    report = tmp_path / "selftest.json"
    try:
        gate = release_step(api, "selftest", "nv-a100", VERSION, "--report", str(report))
        assert gate.returncode == 0, gate.stdout + gate.stderr
        [(cid, container)] = api.containers.items()
        assert container["spec"]["Image"] == REF and container["spec"]["Cmd"] == ["selftest", "--card", "nv-a100", "--json"]
        assert container["spec"]["HostConfig"]["NetworkMode"] == "none" and api.removed == [cid]
        pushed = release_step(api, "push", "nv-a100", VERSION, "--tested", str(report))
    finally:
        api.close()
    for check in ("python", "import", "profile: nv-a100", "v5-generic: repairs R3, R3b", "457-generic: nothing added", "models"):
        assert f"ok   nv-a100 selftest {check}" in gate.stdout, gate.stdout
    tested = json.loads(report.read_text())
    assert tested["passed"] and tested["image_id"] == IMAGE_ID and tested["image"] == REF
    assert {"R3", "R3b"} <= set(tested["models"]["v5-generic"]["repairs"])
    assert "--tokenizer" in tested["models"]["v5-generic"]["args"]
    assert tested["models"]["457-generic"] == {"repairs": [], "findings": [], "args": [], "env": {}}
    # The push: exactly the tested image, its digest printed for the registration.
    assert pushed.returncode == 0, pushed.stderr
    ref = pushed.stdout.strip()
    assert ref == f"{REPOSITORY}@{DIGEST}"
    assert [(p["name"], p["tag"]) for p in api.pushes] == [(REPOSITORY, VERSION)]
    assert f"{VERSION}: digest: {DIGEST}" in pushed.stderr and "Preparing" not in pushed.stderr
    # The registration: the digest as the image, the version in the tag field.
    env = {
        "MODELHUB_API": platform["client"].api_base,
        "MODELHUB_TOKEN": TOKEN,
        "GITHUB_ACTOR": "ci-bot",
        "GITHUB_SERVER_URL": "https://git.example",
        "GITHUB_REPOSITORY": "team/enginex-compat",
    }
    reg = python_module("compat_build.release", "register", "nv-a100", ref, "--tag", VERSION, env=env)
    assert reg.returncode == 0, reg.stderr
    assert json.loads(platform["requests"][0][3]) == {
        "framework": "vllm_compat",
        "gpuType": "nvidia_a100",
        "imageUrl": ref,
        "taskType": "text-generation",
        "createBy": "ci-bot",
        "repoUrl": "https://git.example/team/enginex-compat",
        "tag": VERSION,
    }
    # The job's summary: card, digest, what the self-test saw.
    summary = python_module("compat_build.release", "summary", "nv-a100", "--report", str(report), "--ref", ref, "--tag", VERSION)
    assert summary.returncode == 0, summary.stderr
    text = summary.stdout
    assert text.startswith("### nv-a100\n") and f"| registered | `{ref}` |" in text
    assert "| self-test | passed (6/6 checks) |" in text and f"| tested image id | `{IMAGE_ID}` |" in text
    assert re.search(r"\| repairs for v5-generic \| R3, R3b\b", text) and "| repairs for 457-generic | none |" in text


def _profile_of_another_card(home: Path) -> None:
    path = home / "common" / "profiles" / "nv-a100.json"
    path.write_text(path.read_text().replace('"card": "nv-a100"', '"card": "hygon-k100"'))


def _broken_runtime_package(home: Path) -> None:
    with open(home / "common" / "launch.py", "a") as fh:
        fh.write("\nthis is not python(\n")


@pytest.mark.parametrize(
    "breakage, label, failed",
    [
        (_profile_of_another_card, "nv-a100", ["profile"]),
        (_broken_runtime_package, "nv-a100", ["import", "v5-generic", "457-generic"]),
        (None, "hygon-k100", []),  # the image is labelled for another card: not even started
    ],
)
def test_a_failing_selftest_stops_the_push(built_nv_a100, tmp_path, breakage, label, failed):
    home = image_copy(built_nv_a100, tmp_path)
    if breakage:
        breakage(home)
    api = docker_with(home, label=label)
    report = tmp_path / "selftest.json"
    try:
        gate = release_step(api, "selftest", "nv-a100", VERSION, "--report", str(report))
        pushed = release_step(api, "push", "nv-a100", VERSION, "--tested", str(report))
    finally:
        api.close()
    assert gate.returncode == 1 and "Traceback" not in gate.stderr
    assert f"release selftest: nv-a100: {REF} failed its self-test" in gate.stderr
    assert [line.split(":")[0].rsplit(" ", 1)[1] for line in gate.stdout.splitlines() if line.startswith("FAIL")] == failed
    assert not json.loads(report.read_text())["passed"]
    assert pushed.returncode == 1 and "not pushed" in pushed.stderr and pushed.stdout == ""
    assert api.pushes == [] and list(api.containers) == api.removed  # nothing pushed, no container left
    if label != "nv-a100":
        assert api.containers == {} and "labelled io.enginex.card='hygon-k100'" in gate.stderr


def _tested(tmp_path: Path, **changes) -> Path:
    report = {"card": "nv-a100", "image": REF, "image_id": IMAGE_ID, "passed": True, "problem": "", "checks": [], "models": {}}
    path = tmp_path / "selftest.json"
    path.write_text(json.dumps(dict(report, **changes)))
    return path


@pytest.mark.parametrize(
    "image, chunks, needle",
    [
        ({"Id": "sha256:" + "2" * 64}, PUSHED, "is now image sha256:2222"),  # retagged after the self-test
        (
            {"Id": IMAGE_ID},
            [{"status": "Preparing"}, {"error": "unauthorized: authentication required"}],
            "push of " + REF + " failed: unauthorized",
        ),
        ({"Id": IMAGE_ID}, [{"status": "Pushed"}], "did not report a digest"),
    ],
)
def test_push_refuses_what_it_cannot_vouch_for(tmp_path, image, chunks, needle):
    api = DockerAPI([], images={REF: image}, push_chunks=chunks)
    try:
        pushed = release_step(api, "push", "nv-a100", VERSION, "--tested", str(_tested(tmp_path)))
    finally:
        api.close()
    assert pushed.returncode == 1 and needle in pushed.stderr and pushed.stdout == ""
    assert "Traceback" not in pushed.stderr


def test_push_reads_the_digest_the_daemon_recorded_when_the_stream_has_none(tmp_path):
    image = {"Id": IMAGE_ID, "RepoDigests": [f"other/name@sha256:{'9' * 64}", f"{REPOSITORY}@{DIGEST}"]}
    api = DockerAPI([], images={REF: image}, push_chunks=[{"status": "Pushed"}])
    try:
        pushed = release_step(api, "push", "nv-a100", VERSION, "--tested", str(_tested(tmp_path)))
        missing = release_step(api, "push", "nv-a100", VERSION, "--tested", str(tmp_path / "absent.json"))
    finally:
        api.close()
    assert pushed.returncode == 0 and pushed.stdout.strip() == f"{REPOSITORY}@{DIGEST}"
    assert missing.returncode == 1 and "the self-test step must pass first" in missing.stderr


@pytest.mark.parametrize(
    "ref, parts",
    [
        ("harbor.4pd.io/team/img:v1", ("harbor.4pd.io/team/img", "v1", "")),
        ("harbor.4pd.io/team/img@sha256:ab", ("harbor.4pd.io/team/img", "", "sha256:ab")),
        ("localhost:5000/img:v1@sha256:ab", ("localhost:5000/img", "v1", "sha256:ab")),
        ("localhost:5000/img", ("localhost:5000/img", "", "")),
    ],
)
def test_split_ref(ref, parts):
    assert release.split_ref(ref) == parts


def test_register_of_a_digest_needs_the_tag_in_its_own_field(platform):
    from tests.conftest import TOKEN

    env = {"MODELHUB_API": platform["client"].api_base, "MODELHUB_TOKEN": TOKEN}
    result = python_module("compat_build.release", "register", "nv-a100", f"{REPOSITORY}@{DIGEST}", env=env)
    assert result.returncode == 1 and "pass --tag VERSION" in result.stderr and platform["requests"] == []


def test_selftest_output_is_found_after_other_lines():
    data = {"passed": True, "card": "x", "checks": [{"name": "a", "ok": True, "detail": ""}], "models": {}}
    assert release._selftest_output("welcome to the base image\n" + json.dumps(data, indent=1)) == data
    assert release._selftest_output("Traceback (most recent call last):\n  oops\n") is None


def test_summary_of_a_job_that_stopped_early(tmp_path):
    failed = _tested(
        tmp_path,
        passed=False,
        problem="exit 1, failed checks: profile",
        checks=[{"name": "profile", "ok": False, "detail": "baked for card 'hygon-k100'"}],
    )
    result = python_module("compat_build.release", "summary", "nv-a100", "--report", str(failed), "--tag", VERSION)
    assert "| registered | nothing (the job stopped before) |" in result.stdout
    assert "| self-test | FAILED: exit 1, failed checks: profile (0/1 checks) |" in result.stdout
    assert "- `profile`: baked for card 'hygon-k100'" in result.stdout
    absent = python_module("compat_build.release", "summary", "nv-a100", "--report", str(tmp_path / "none.json"))
    assert absent.returncode == 0 and "| self-test | did not run |" in absent.stdout


def test_release_check_with_a_daemon_builds_and_self_tests_every_card():
    """`make release-check` where a daemon answers: each card is built, then gated like a release;
    a card whose self-test fails fails the check (the stand-in's containers answer per card)."""
    m = manifest.load()
    names = manifest.card_names(m)  # every card and engine variant of the matrix
    tags = {card: manifest.image_ref(m, card, "release-check") for card in names}

    def run(image, command):
        card = command[2]
        ok = card != "hygon-k100"
        report = {
            "passed": ok,
            "card": card,
            "models": {},
            "checks": [{"name": "profile", "ok": ok, "detail": card if ok else "baked for another card"}],
        }
        return (0 if ok else 1), json.dumps(report).encode(), b""

    api = DockerAPI(
        [{"aux": {"ID": "sha256:" + "3" * 64}}],
        runner=run,
        images={tag: {"Id": "sha256:" + "3" * 64, "Labels": {"io.enginex.card": card}} for card, tag in tags.items()},
    )
    try:
        result = python_module(
            "compat_build.release",
            "check",
            "--out",
            str(ROOT / "build" / "release-check"),
            env={"DOCKER_HOST": api.url, "MODELHUB_TOKEN": ""},
        )
    finally:
        api.close()
    assert result.returncode == 1, result.stdout + result.stderr
    assert [b["query"]["t"] for b in api.builds] == [tags[c] for c in names]
    assert [c["spec"]["Cmd"] for c in api.containers.values()] == [["selftest", "--card", c, "--json"] for c in names]
    for card in ("iluvatar-bi100", "nv-a100"):
        assert f"ok   {card}: docker build" in result.stdout and f"ok   {card}: selftest: docker run --rm {tags[card]} selftest" in (
            result.stdout
        )
    assert "FAIL hygon-k100 selftest profile: baked for another card" in result.stdout
    assert f"FAIL hygon-k100: selftest: hygon-k100: {tags['hygon-k100']} failed its self-test" in result.stdout
    assert result.stdout.rstrip().endswith("release-check: FAILED: hygon-k100: selftest")
