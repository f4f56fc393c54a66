"""The README and docs/ as a newcomer walks them: every command they show is run, every link
resolves, and the Layout names every folder of the checkout.

A command is a line of a ```sh block (comments left out), or what follows `$ ` in any other
fenced block. The cheap ones (`python3 -m common explain|preflight|triage`) are run here, with
this venv's Python from the repository root, on a committed fixture model and on logs written
here, and must exit 0. Every other one starts an engine, Docker or the whole suite: MAPPED names
the test that runs it (or the same code path), and that test must exist. A command that is
neither fails this test: showing a new command is deciding who keeps it true."""

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatch
from pathlib import Path
from typing import Dict, List, Tuple


ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```\s*([\w-]*)\s*$")
LINK = re.compile(r"\]\(([^)\s]+)\)")

# The commands run here: `python3 -m common SUBCOMMAND ...`, no engine start.
CHEAP = ("explain", "preflight", "triage")

# Shown, too costly to run here, and who runs them. Each value: "path::name" entries; the file
# must exist and name that test (or, for the suite itself, the command).
MAPPED: Dict[str, Tuple[str, ...]] = {
    # The whole suite: CI's entry point runs it.
    "make test": (".ci/run::make test",),
    # scripts/demo.py on the card's real engine (two starts and doctor).
    "make demo": ("tests/e2e/test_demo.py::test_make_demo_serves_a_model_the_engine_refuses_with_its_authors_tokens",),
    # doctor asks the card's real engine (its transformers, its vLLM building the model class).
    "python3 -m common doctor /path/to/model --card iluvatar-bi100": (
        "tests/e2e/test_doctor_vs_engine.py::test_doctor_verdict_is_the_engines",
    ),
    "python3 -m common doctor submissions/ --card all": (
        "common/tests/test_doctor_many.py::test_a_folder_of_models_is_one_row_per_model_and_card_with_one_process_per_card",
        "common/tests/test_doctor_many.py::test_card_all_judges_every_engine_profile",
    ),
    "python3 -m common doctor harness/fixtures/models --card all": (
        "common/tests/test_doctor_many.py::test_a_folder_of_models_is_one_row_per_model_and_card_with_one_process_per_card",
        "common/tests/test_doctor_many.py::test_card_all_judges_every_engine_profile",
    ),
    # The images, in a Docker daemon (the image tier).
    "docker run --rm -v /path/to/model:/model:ro IMAGE doctor [--json]": (
        "tests/images/test_every_image.py::test_doctor_inside_the_image_is_the_users_pre_submit_check",
    ),
    "docker run --rm --user 54321:54321 --read-only --tmpfs /tmp IMAGE selftest [--card CARD]": (
        "tests/images/test_every_image.py::test_the_release_gate_passes_on_the_image_run_as_the_platform_runs_it",
    ),
    "make render": (
        "tests/integration/test_images.py::test_rendering_is_deterministic",
        "tests/integration/test_images.py::test_rendered_context_is_complete_and_lint_clean",
    ),
    # No vendor base is reachable from a test machine: `make build` is held where it fails, and its
    # builds on the local bases (`make images`).
    "make build CARD=nv-a100": (
        "tests/images/test_build_failures.py::test_a_base_the_daemon_lacks_and_cannot_pull_is_named",
        "tests/images/test_build_failures.py::test_make_build_of_every_card_goes_on_past_a_failure_and_sums_up",
    ),
    "make images": (
        "tests/integration/test_local_bases.py::test_make_images_builds_every_card_once_on_its_own_base",
        "tests/images/test_every_image.py::test_labels_name_the_card_its_engine_its_base_and_the_revision",
    ),
    "make release-check": (
        "tests/integration/test_images.py::test_release_check_runs_every_local_step",
        "tests/images/test_build_failures.py::test_release_check_builds_and_gates_every_card_on_the_local_bases",
    ),
    "make docker-prune": (
        "tests/images/test_prune.py::test_the_whole_prune_names_superseded_bases_and_release_named_stand_ins_never_current_ones",
    ),
    # Adding a card, the worked example (on a copy of the cards, never the checkout's).
    "cp -r cards/nv-a100 cards/nv-h100": (
        "tests/integration/test_profiles_and_manifest.py::test_a_card_is_one_folder_and_one_matrix_line",
    ),
    'sed -i \'s/gpu_type = "nvidia_a100"/gpu_type = "nvidia_h100"/\' cards/nv-h100/card.toml': (
        "tests/integration/test_profiles_and_manifest.py::test_a_card_is_one_folder_and_one_matrix_line",
    ),
    "make render profiles": (
        "tests/integration/test_images.py::test_task_info_files_agree_with_the_manifest",
        "tests/integration/test_profiles_and_manifest.py::test_committed_profiles_match_manifest_and_real_engine",
    ),
    # The conformance cells, on the real engines.
    "make conformance": (
        "tests/e2e/vllm055/test_image_change_cells_vllm055.py::test_the_cells_the_image_changes_come_out_as_committed",
        "tests/e2e/vllm011/test_image_change_cells_vllm011.py::test_the_cells_the_image_changes_come_out_as_committed",
    ),
    "make conformance CONFORMANCE_ARGS=--all": (
        "tests/e2e/vllm055/test_image_change_cells_vllm055.py::test_the_cells_the_image_changes_come_out_as_committed",
        "tests/e2e/vllm011/test_image_change_cells_vllm011.py::test_the_cells_the_image_changes_come_out_as_committed",
        "tests/unit/test_conformance_fingerprints.py::test_every_committed_cell_proves_the_code_that_runs",
    ),
}


def documents() -> List[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def shown_commands(text: str) -> List[str]:
    """The commands of a document's fenced blocks, whitespace normalised, in order."""
    commands, lang, pending = [], None, ""
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence:
            lang = None if lang is not None else fence.group(1)
            continue
        if lang is None:
            continue
        if lang == "sh":
            text = re.split(r"\s#\s|\s#$", line, maxsplit=1)[0].strip()
            if not text or text.startswith("#"):
                continue
        elif line.startswith("$ "):
            text = line[2:].strip()
        else:
            continue
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        commands.append(" ".join((pending + text).split()))
        pending = ""
    return commands


def all_commands() -> Dict[str, List[str]]:
    """command -> the documents that show it."""
    found: Dict[str, List[str]] = {}
    for doc in documents():
        for command in shown_commands(doc.read_text(encoding="utf-8")):
            found.setdefault(command, []).append(str(doc.relative_to(ROOT)))
    return found


def is_cheap(command: str) -> bool:
    words = command.split()
    return words[:3] == ["python3", "-m", "common"] and len(words) > 3 and words[3] in CHEAP


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def top_level_folders() -> List[str]:
    """The checkout's top-level folders: those git tracks, or, outside a git checkout, those on
    disk that are not hidden (but .ci and .gitea) nor ignored by .gitignore."""
    try:
        proc = subprocess.run(["git", "ls-files", "-z"], cwd=str(ROOT), capture_output=True, timeout=60)
    except OSError:
        proc = None
    if proc is not None and proc.returncode == 0 and proc.stdout:
        return sorted({p.split("/", 1)[0] for p in proc.stdout.decode().split("\0") if "/" in p})
    ignored = [
        line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    return sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and (not p.name.startswith(".") or p.name in (".ci", ".gitea")) and not any(fnmatch(p.name, pat) for pat in ignored)
    )


# ---- structure ------------------------------------------------------------------------------


def test_the_readme_is_short_and_links_every_doc_that_exists():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, "README.md is the newcomer's page: move reference prose to docs/"
    linked = {target.split("#", 1)[0] for target in LINK.findall(text)}
    docs = {str(p.relative_to(ROOT)) for p in DOCS.glob("*.md")}
    assert docs and docs <= linked, f"docs the README does not link: {sorted(docs - linked)}"
    # A newcomer's set-up is two commands, and they are the first the README shows.
    assert shown_commands(section(text, "Try it")) == ["make demo", "make test"]


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    for doc in documents():
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if not path or re.match(r"^[a-z]+:", path):
                continue
            if not (doc.parent / path).resolve().is_file():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_layout_names_every_top_level_folder():
    layout = section(README.read_text(encoding="utf-8"), "Layout")
    folders = top_level_folders()
    assert {"common", "tests", ".ci"} <= set(folders), folders
    missing = [name for name in folders if not re.search(rf"^{re.escape(name)}/", layout, re.MULTILINE)]
    assert not missing, f"README.md's Layout does not name {missing}"


# ---- the commands ---------------------------------------------------------------------------


def test_every_command_shown_is_run_here_or_by_a_named_test():
    shown = all_commands()
    assert "make demo" in shown and "make test" in shown
    unowned = {c: where for c, where in shown.items() if not is_cheap(c) and c not in MAPPED}
    assert not unowned, f"commands shown that nothing runs (run them here or add them to MAPPED): {unowned}"
    stale = sorted(set(MAPPED) - set(shown))
    assert not stale, f"MAPPED names commands no document shows any more: {stale}"
    missing = []
    for command, owners in MAPPED.items():
        for owner in owners:
            path, name = owner.split("::", 1)
            file = ROOT / path
            text = file.read_text(encoding="utf-8") if file.is_file() else ""
            wanted = f"def {name}(" if path.endswith(".py") else name
            if wanted not in text:
                missing.append(f"{command}: {owner}")
    assert not missing, f"MAPPED names tests that do not exist: {missing}"


def write_logs(base: Path) -> Dict[str, Path]:
    """The logs the triage examples read: a folder of pod logs, a gzipped log, a JSON error report."""
    logs = base / "logs"
    logs.mkdir()
    (logs / "pod.log").write_text(
        "INFO starting vllm serve /model\nValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported.\n"
    )
    with gzip.open(base / "pod_runtime_log.txt.gz", "wt") as fh:
        fh.write("RuntimeError: Insufficient space in /dev/shm to hold the tensors\n")
    (base / "error_report_raw.json").write_text(
        json.dumps({"status": "failed", "detail": {"log": "OSError: libfoo.so: failed to map segment from shared object", "exit_code": 1}})
    )
    return {
        "logs/": logs,
        "pod_runtime_log.txt.gz": base / "pod_runtime_log.txt.gz",
        "error_report_raw.json": base / "error_report_raw.json",
    }


def user_env(tmp_path: Path) -> Dict[str, str]:
    """A user's shell: none of a developer's COMPAT_* settings, the engine Python the docs say to
    set (this venv: the nv-a100 engine's transformers), a work dir of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_")}
    env.update(COMPAT_ENGINE_PYTHON=sys.executable, COMPAT_WORK_DIR=str(tmp_path / "work"))
    return env


def check_output(argv: List[str], proc: subprocess.CompletedProcess) -> None:
    """What each cheap command must show beyond exiting 0."""
    sub = argv[3]
    if sub == "explain" and len(argv) > 4:
        assert argv[4] in proc.stdout
    elif sub == "preflight" and "--json" in argv:
        plan = json.loads(proc.stdout)
        assert {r["code"] for r in plan["repairs"]} == {"R3", "R3b", "R5"}, plan["repairs"]
    elif sub == "preflight":
        assert "R3b" in proc.stdout
    elif sub == "triage" and "--json" in argv:
        codes = {Path(f["path"]).name: f["code"] for f in json.loads(proc.stdout)["files"]}
        assert codes == {"pod_runtime_log.txt.gz": "SHM", "error_report_raw.json": "NOEXEC"}, codes
    elif sub == "triage":
        assert "R3b" in proc.stdout


def test_the_cheap_commands_shown_run_from_the_repository_root(models, tmp_path):
    places = {"/path/to/model": models("v5-generic"), **write_logs(tmp_path)}
    commands = [c for c in all_commands() if is_cheap(c)]
    assert commands, "the README shows no command a newcomer can run at once"
    env = user_env(tmp_path)

    def run(command: str) -> str:
        argv = [str(places.get(word, word)) for word in shlex.split(command)]
        proc = subprocess.run([sys.executable, *argv[1:]], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=120)
        try:
            assert proc.returncode == 0 and "Traceback" not in proc.stderr
            check_output(argv, proc)
        except (AssertionError, ValueError, KeyError) as exc:
            return f"{command}: exit {proc.returncode} {exc}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}"
        return ""

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(run, commands) if f]
    assert not failures, "\n\n".join(failures)


def test_no_tracked_file_keeps_a_merge_conflict():
    """A merge resolved by hand leaves no conflict markers behind (docs/rules.md once kept both
    sides of one)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)
    kept = []
    for name in filter(None, tracked):
        path = ROOT / name
        if path.suffix in (".md", ".py", ".toml", ".txt", ".sh", ".yml", ".json", ".jinja", ".cfg") or path.name == "Makefile":
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            kept += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in marker.finditer(text)]
    assert kept == []
