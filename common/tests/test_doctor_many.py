"""doctor over many models: one row per model and card, totals per card, one engine-Python
process per card for the whole list's checks (and one more for its model classes), progress on
stderr, a model that breaks doctor is a row."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from common.doctor import doctor_many

from common.tests.helpers import fake_engine, model_dir, run_common

FIXTURES = Path(__file__).resolve().parents[2] / "harness" / "fixtures" / "models"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def counting_python(tmp_path: Path, name: str, python: str = sys.executable) -> tuple:
    """An engine Python that logs each start to a file, then is `python` (the dev venv's)."""
    log = tmp_path / f"{name}.starts"
    script = tmp_path / f"{name}-python"
    script.write_text(f'#!/bin/sh\necho start >> "{log}"\nexec "{python}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def starts(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def folder(tmp_path, models):
    """A folder of model folders: the committed fixtures, plus a file that is no model."""
    base = tmp_path / "submissions"
    base.mkdir()
    for name in NAMES:
        os.symlink(models(name), base / name)
    (base / "notes.txt").write_text("not a model")
    return base


def building_env(tmp_path, env_for_tests, **engines: str) -> dict:
    """env_for_tests with the model build on: each COMPAT_ENGINE_PYTHON* named in `engines` has a
    fake vLLM that builds every model class (helpers.fake_engine) and the dev venv's transformers,
    so that a row "starts" only where its model build passed, as on a real engine."""
    env = dict(env_for_tests)
    env.pop("COMPAT_SKIP")
    for variable, name in engines.items():
        env[variable] = str(fake_engine(tmp_path, name)[0])
    return env


def test_a_folder_of_models_is_one_row_per_model_and_card_with_one_process_per_card(tmp_path, folder, env_for_tests):
    env = building_env(tmp_path, env_for_tests, COMPAT_ENGINE_PYTHON="default-engine", COMPAT_ENGINE_PYTHON_NEXT="next-engine")
    default, default_log = counting_python(tmp_path, "default", env["COMPAT_ENGINE_PYTHON"])
    nxt, next_log = counting_python(tmp_path, "next", env["COMPAT_ENGINE_PYTHON_NEXT"])
    env.update(COMPAT_ENGINE_PYTHON=str(default), COMPAT_ENGINE_PYTHON_NEXT=str(nxt))
    proc = run_common(["doctor", str(folder), "--card", "nv-a100", "--json"], env)
    report = json.loads(proc.stdout)
    assert [Path(m).name for m in report["models"]] == NAMES
    assert [(Path(r["model"]).name, r["card"]) for r in report["rows"]] == [(n, c) for n in NAMES for c in ("nv-a100", "nv-a100@next")]
    # Every model's checks on a card went to one engine process, and their model classes to one
    # more (MB), not one per model.
    assert starts(default_log) == 2 and starts(next_log) == 2, proc.stderr
    rows = {(Path(r["model"]).name, r["card"]): r for r in report["rows"]}
    assert rows["457-generic", "nv-a100"]["state"] == "starts as is"
    assert rows["v5-generic", "nv-a100"]["state"] == "starts with repairs" and rows["v5-generic", "nv-a100"]["repairs"] == [
        "R3",
        "R3b",
        "R5",
    ]
    assert rows["457-generic-notemplate", "nv-a100"]["repairs"] == ["R2"]
    totals = report["cards"]["nv-a100"]["totals"]
    as_is = sum(1 for (_, card), r in rows.items() if card == "nv-a100" and r["state"] == "starts as is")
    assert as_is >= 1 and "v5-generic" in NAMES and "457-generic" in NAMES
    assert (totals["models"], totals["start_without_repairs"], totals["start_with_repairs"], totals["fail"]) == (
        len(NAMES),
        as_is,
        len(NAMES),
        0,
    )
    assert report["cards"]["nv-a100"]["engine_python"] == {"path": str(default), "source": "COMPAT_ENGINE_PYTHON"}
    assert proc.returncode == 0
    # Progress: one line per model and card on stderr, stdout kept for the report.
    progress = [line for line in proc.stderr.splitlines() if line.startswith("doctor: nv-a100 [")]
    at = NAMES.index("v5-generic")
    assert len(progress) == len(NAMES) and f"doctor: nv-a100 [{at + 1}/{len(NAMES)}]" in progress[at]
    assert "v5-generic: starts with repairs (R3, R3b, R5)" in progress[at]
    assert "[compat]" not in proc.stderr


def test_markdown_rows_and_totals_for_several_paths(tmp_path, models, env_for_tests):
    paths = [str(models("457-generic")), str(models("v5-generic"))]
    proc = run_common(["doctor", *paths, "--card", "nv-a100"], building_env(tmp_path, env_for_tests, COMPAT_ENGINE_PYTHON="engine"))
    out = proc.stdout
    assert "| model | card | verdict | codes |" in out
    assert f"| {paths[0]} | nv-a100 | starts as is | - |" in out
    assert f"| {paths[1]} | nv-a100 | starts with repairs | R3, R3b, R5 |" in out
    # The variant without an engine Python to ask: unverified, counted apart.
    assert f"| {paths[1]} | nv-a100@next | unverified |" in out
    assert "| nv-a100 | 0.11.0 | 2 | 1 | 2 | 0 | 0 | 0 |" in out
    assert proc.returncode == 2  # something could not be verified, nothing fails


def test_card_all_judges_every_engine_profile(tmp_path, models, env_for_tests):
    proc = run_common(["doctor", str(models("457-generic")), "--card", "all", "--json"], env_for_tests)
    report = json.loads(proc.stdout)
    assert list(report["cards"]) == doctor_many.cards_of("all") == ["hygon-k100", "iluvatar-bi100", "nv-a100", "nv-a100@next"]
    assert [r["card"] for r in report["rows"]] == list(report["cards"])


def test_a_model_that_breaks_doctor_is_a_row_with_its_error(tmp_path, models, env_for_tests, monkeypatch, capsys):
    """A bug met on one model (here injected into the planner) costs that model's row only; a
    path that is no directory is a row too."""
    real = doctor_many.start_plan
    broken = model_dir(tmp_path / "broken", {"config.json": {"model_type": "llama"}})

    def start_plan(model, *args, **kwargs):
        if Path(model) == broken:
            raise RuntimeError("planner bug")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(doctor_many, "start_plan", start_plan)
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"))
    paths = [str(models("457-generic")), str(broken), str(tmp_path / "missing")]
    code = doctor_many.run(paths, "nv-a100@next", [], env, as_json=True)
    report = json.loads(capsys.readouterr().out)
    states = [(Path(r["model"]).name, r["state"], r["error"]) for r in report["rows"]]
    assert states[1] == ("broken", "error", "RuntimeError: planner bug")
    assert states[2][1] == "error" and "is not a directory" in states[2][2]
    assert states[0][1] != "error" and report["cards"]["nv-a100@next"]["totals"]["errors"] == 2
    assert code == 2


def test_a_crash_in_the_engine_process_costs_one_models_verdict(tmp_path, env_for_tests):
    """The shared engine process dies on one request: that request fails, the rest are answered
    by a fresh process (never judged by another model's crash)."""
    from common.start.verify import run_checks_of_many

    python, log = counting_python(tmp_path, "crashing")
    # A stand-in engine Python: dies on the request naming the module `boom`, else the real one.
    python.write_text(
        f'#!/bin/sh\necho start >> "{log}"\n'
        f'input=$(cat)\ncase "$input" in *\'"boom"\'*) printf "%s" "$input" | "{sys.executable}" -c '
        "\"import json,sys; r=json.load(sys.stdin); i=[x.get('name') for x in r].index('boom'); "
        "[print(json.dumps({'index': n, 'ok': True, 'reason': 'fine'})) for n in range(i)]; sys.exit(3)\";; "
        f'*) printf "%s" "$input" | exec "{sys.executable}" "$@";; esac\n'
    )
    requests = [{"kind": "module", "name": "json"}, {"kind": "module", "name": "boom"}, {"kind": "module", "name": "json.decoder"}]
    verdicts = run_checks_of_many(requests, dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(python)), 60)
    assert [v.ok for v in verdicts] == [True, False, True] and "exited 3" in verdicts[1].reason
    assert starts(log) == 2


def test_a_folder_is_told_from_a_model(tmp_path, models):
    assert not doctor_many.is_folder_of_models(str(models("v5-generic")))
    assert doctor_many.is_folder_of_models(str(FIXTURES))
    assert doctor_many.model_dirs([str(FIXTURES)]) == [str(FIXTURES / n) for n in NAMES]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not doctor_many.is_folder_of_models(str(empty)) and doctor_many.model_dirs([str(empty)]) == [str(empty)]


def test_the_model_builds_process_starts_before_its_requests_and_answers_them(tmp_path, env_for_tests):
    """doctor starts the model build's engine process first (verify.Warm: engine_checks/process.py --warm
    imports vLLM and torch while the rules and the checks run) and hands it its requests later:
    one process, and the answers are those of a process started with them."""
    from common.start.verify import Warm, run_checks_of_many

    python, log = counting_python(tmp_path, "warm")
    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(python))
    warm = Warm(env)
    requests = [
        {"kind": "module", "name": "json"},
        {"kind": "module", "name": "json.decoder"},
        {"kind": "module", "name": "nosuchpackage.x"},
    ]
    verdicts = run_checks_of_many(requests, env, 60, warm)
    cold = run_checks_of_many(requests, env, 60)
    assert [(v.ok, v.reason) for v in verdicts] == [(v.ok, v.reason) for v in cold]
    assert [v.ok for v in verdicts] == [True, True, None] and "json" in verdicts[1].result["path"]
    assert starts(log) == 2  # the warm process, then the cold one: no third for the warm requests
    assert warm.take() is None  # handed over once


def test_a_warm_process_never_handed_its_requests_is_ended(tmp_path, env_for_tests):
    from common.start.verify import Warm, run_checks_of_many

    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(counting_python(tmp_path, "unused")[0]))
    unused = Warm(env)
    proc = unused.proc
    unused.close()
    assert proc.returncode is not None
    # Nothing to build: the warm process is ended too, and nothing is answered.
    empty = Warm(env)
    proc = empty.proc
    assert run_checks_of_many([], env, 60, empty) == [] and proc.returncode is not None
