"""Card images: rendered build contexts, their steps run against real site-packages trees, the
task_info files, `make build` through the real docker SDK, the release workflow, release check."""

import filecmp
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compat_build import manifest, release, render, task_info
from tests.docker_api import DROP, DockerAPI
from compat_build.render import HOME
from harness.ports import free_port
from tests.integration.test_library_patches import VENVS

ROOT = Path(__file__).resolve().parents[2]
# Every image of a release: the cards' default engines and their variants, from the matrix.
CARDS = manifest.card_names(manifest.load())
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
    assert f'ENTRYPOINT ["{HOME}/entrypoint.sh"]' in text
    # What changes with every build (version, revision) is last: a new commit rebuilds no layer.
    lines = text.splitlines()
    assert max(i for i, line in enumerate(lines) if line.startswith(("RUN", "COPY", "ENTRYPOINT"))) < lines.index("ARG REVISION=unknown")
    # Rarely-changing layers first: every patch and the profile step come before the runtime package.
    runtime_at = lines.index(f"COPY runtime/common/ {HOME}/common/")
    assert all(i < runtime_at for i, line in enumerate(lines) if "image_steps" in line)
    for code in entry.build_patches:
        assert (code in text) if code != "L3" else ("install_patched_ops" in text)
    from compat_build.release import copy_sources_missing

    assert copy_sources_missing(str(ctx)) == []
    runtime = ctx / "runtime" / "common"
    assert (runtime / "start" / "launch.py").is_file() and (runtime / "rules" / "r2_chat_template.py").is_file()
    assert not (runtime / "tests").exists() and not list((runtime / "profiles").glob("*.json"))
    assert filecmp.cmp(ctx / "entrypoint.sh", ROOT / "common" / "entrypoint.sh", shallow=False)
    # The self-test's models: the committed fixtures, byte for byte, copied into the image.
    for model in render.SELFTEST_MODELS:
        assert not filecmp.dircmp(ctx / "selftest" / "models" / model, ROOT / "harness" / "fixtures" / "models" / model).diff_files
        assert (ctx / "selftest" / "models" / model / "config.json").is_file()
    assert f"COPY selftest/ {HOME}/selftest/" in lines
    assert os.access(ctx / "entrypoint.sh", os.X_OK)
    lint = subprocess.run([str(BIN / "hadolint"), "--failure-threshold", "error", str(ctx / "Dockerfile")], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_cards_of_one_base_share_the_baked_inspections_which_no_library_patch_can_change(tmp_path):
    """vLLM's model-class inspections are baked right after the build steps are copied, before any
    card's own step: every card of a base renders those lines the same (Docker builds that layer
    once for them all). Sound because no library patch edits a module of vLLM's models."""
    from compat_build.patches import PATCHES

    assert not [p.MODULE for p in PATCHES.values() if p.MODULE.startswith(("vllm.model_executor.models", "vllm.models"))]
    heads = {}
    for card in CARDS:
        lines = (rendered(tmp_path, card) / "Dockerfile").read_text().splitlines()
        bake = next(i for i, line in enumerate(lines) if "bake_modelinfos" in line)
        assert all(i > bake for i, line in enumerate(lines) if "apply_patches" in line or "install_patched_ops" in line)
        heads.setdefault(manifest.load().cards[card].base_image, set()).add("\n".join(lines[2 : bake + 1]))
    assert all(len(h) == 1 for h in heads.values()) and len(heads) < len(CARDS)
    contexts = [rendered(tmp_path / card, card) / "steps" for card in CARDS]
    assert all(tree(c) == tree(contexts[0]) for c in contexts)


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
    job = flow["jobs"]["lint-and-unit"]
    assert "if" not in job
    runs = [s.get("run", "") for s in job["steps"]]
    venv, lint, unit = (next(i for i, r in enumerate(runs) if m in r) for m in ("make venv", "make lint", "pytest common/ tests/unit"))
    assert venv < lint and venv < unit
    assert runs[unit].startswith(".venv/bin/python -m pytest")


def suite_job(job: dict) -> None:
    """A job that runs the README's `make test` whole, as CI's entry point does, on a runner with Docker."""
    assert job["runs-on"] == "docker-host" and job["timeout-minutes"] <= 90
    assert [s["run"] for s in job["steps"] if "run" in s] == ["CI=true make test"]
    labels = yaml.safe_load((ROOT / ".gitea" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    assert job["runs-on"] in labels


def test_make_test_runs_on_pushes_to_main_and_before_any_release_build():
    flow = yaml.safe_load(TEST_WORKFLOW.read_text())
    suite = flow["jobs"]["suite"]
    suite_job(suite)
    assert suite["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'" and suite["needs"] == "lint-and-unit"
    release = workflow()["jobs"]
    suite_job(release["suite"])
    # Nothing of the release runs before it passed: every other job waits on it, directly or not.
    assert release["matrix"]["needs"] == "suite" and release["image"]["needs"] == "matrix"


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


# The push of a tested image where the daemon's stream says something a real daemon and registry
# here cannot be made to say: the Docker API stand-in (tests/docker_api.py).

VERSION = "v9.9.9"
REF = manifest.image_ref(manifest.load(), "nv-a100", VERSION)
REPOSITORY = REF.rsplit(":", 1)[0]
IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "d" * 64


def release_step(api: DockerAPI, *args):
    return python_module("compat_build.release", *args, env={"DOCKER_HOST": api.url})


def _tested(tmp_path: Path, **changes) -> Path:
    report = {"card": "nv-a100", "image": REF, "image_id": IMAGE_ID, "passed": True, "problem": "", "checks": [], "models": {}}
    path = tmp_path / "selftest.json"
    path.write_text(json.dumps(dict(report, **changes)))
    return path


@pytest.mark.parametrize(
    "chunks, needle",
    [
        ([{"status": "Preparing"}, {"error": "unauthorized: authentication required"}], "push of " + REF + " failed: unauthorized"),
        ([{"status": "Pushed"}], "did not report a digest"),
        ([{"status": "Preparing"}, DROP], "push of " + REF + " failed"),  # the daemon died mid-push
    ],
)
def test_push_refuses_what_it_cannot_vouch_for(tmp_path, chunks, needle):
    api = DockerAPI([], images={REF: {"Id": IMAGE_ID}}, push_chunks=chunks)
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


def test_a_daemon_that_dies_mid_build_ends_the_build_in_one_sentence():
    api = DockerAPI([{"stream": "Step 1/16 : ARG BASE_IMAGE=x\n"}, {"stream": "Step 2/16 : FROM ${BASE_IMAGE}\n"}, DROP])
    try:
        result = python_module("compat_build.build", "nv-a100", env={"DOCKER_HOST": api.url})
    finally:
        api.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "nv-a100: the Docker daemon's answer could not be read" in result.stderr and "last step: Step 2/16" in result.stderr


def test_stand_ins_are_named_apart_from_the_release_and_never_pushed(tmp_path):
    """Built on a local base, an image takes a name no `make build` image has and no push can
    publish (`.invalid` never resolves); `release push` refuses one before asking the daemon."""
    m = manifest.load()
    for card in CARDS:
        standin, release_ref = manifest.standin_ref(m, card, "dev"), manifest.image_ref(m, card, "dev")
        assert manifest.is_standin(standin) and not manifest.is_standin(release_ref)
        assert standin.rsplit("/", 1)[1] == release_ref.rsplit("/", 1)[1]  # same repository name, another registry
        assert standin.split("/", 1)[0] == "standin.invalid"
    api = DockerAPI([], images={})
    try:
        env = {"DOCKER_HOST": api.url, "COMPAT_RELEASE_REGISTRY": manifest.STANDIN_REGISTRY}
        ref = manifest.standin_ref(m, "nv-a100", VERSION)
        pushed = python_module("compat_build.release", "push", "nv-a100", VERSION, "--tested", str(_tested(tmp_path, image=ref)), env=env)
    finally:
        api.close()
    assert pushed.returncode == 1 and "built on a local stand-in of the vendor base; never pushed" in pushed.stderr
    assert api.pushes == []


def test_make_build_of_every_card_sums_up_the_failures():
    """`make build CARD=all` where the daemon dies on every build: each card is tried, then one
    summary line per card, exit 1."""
    api = DockerAPI([{"stream": "Step 1/16 : ARG BASE_IMAGE=x\n"}, DROP])
    try:
        result = python_module("compat_build.build", "all", env={"DOCKER_HOST": api.url, "REVISION": ""})
    finally:
        api.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert f"build: 0 of {len(CARDS)} cards built (revision {head})" in result.stdout
    for card in CARDS:
        assert f"building {card} -> " in result.stdout
        assert f"  FAIL {card}: the Docker daemon's answer could not be read" in result.stdout


def test_the_gate_report_says_how_the_self_test_ran(tmp_path):
    report = _tested(tmp_path, runtime={"uid": 54321, "gid": 54321, "read_only_root": True, "tmp_noexec": True})
    result = python_module("compat_build.release", "summary", "nv-a100", "--report", str(report), "--tag", VERSION)
    assert "| self-test ran as | uid 54321, read-only root, /tmp without exec |" in result.stdout
