"""The seconds the suite orders its work by (tests/durations.py): kept across runs on this
machine, merged run after run, and never a reason to fail or skip."""

import json
import os

import pytest

from tests import durations


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(durations, "RUN_FILE", tmp_path / "build" / "test-durations.json")
    monkeypatch.setattr(durations, "SEED_FILE", tmp_path / "no-seed.json")
    return tmp_path


def test_a_run_of_one_tier_keeps_the_others_seconds_for_the_next_order(files):
    durations.save({"tests/unit/a.py::t": 1.0, "tests/e2e/b.py::t": 80.0})
    durations.save({"tests/unit/a.py::t": 2.5})
    assert durations.known() == {"tests/unit/a.py::t": 2.5, "tests/e2e/b.py::t": 80.0}
    # build/ holds this run's figures alone, slowest first
    run = json.loads(durations.RUN_FILE.read_text())
    assert run == {"seconds": 2.5, "tests": {"tests/unit/a.py::t": 2.5}}


def test_a_scope_no_run_has_timed_weighs_its_engine_starts():
    members = {"m.py": ["m.py::a", "m.py::b"], "n.py": ["n.py::c"], "o.py::d": ["o.py::d"]}
    seen = {"m.py::a": 3.0, "m.py::b": 4.0}
    got = durations.scope_seconds(members, {"n.py": 2}, seen)
    assert got == {"m.py": 7.0, "n.py": 2 * durations.START_SECONDS, "o.py::d": 0.0}


@pytest.mark.parametrize("text", ["{not json", '{"tests": [1, 2]}', '{"tests": {"a": "slow", "b": -1, "c": true, "d": 2}}', "[]"])
def test_a_damaged_cache_file_orders_by_what_it_still_says(files, text):
    path = durations.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert durations.known() == ({"d": 2.0} if '"d": 2' in text else {})
    durations.save({"x": 1.0})  # and the next run writes it whole again
    assert durations.known()["x"] == 1.0


def test_an_unwritable_cache_is_said_and_the_run_goes_on(files, capsys):
    durations.cache_file().parent.parent.mkdir(parents=True)
    durations.cache_file().parent.write_text("a file where the cache folder should be")
    durations.save({"x": 1.0})
    assert "durations: cannot write" in capsys.readouterr().err
    assert json.loads(durations.RUN_FILE.read_text())["tests"] == {"x": 1.0}


def test_a_machine_that_has_run_nothing_orders_by_the_committed_seed(files, monkeypatch):
    seed = files / "seed.json"
    seed.write_text(json.dumps({"seconds": 90, "tests": {"tests/e2e/b.py::t": 90}}))
    monkeypatch.setattr(durations, "SEED_FILE", seed)
    assert durations.known() == {"tests/e2e/b.py::t": 90.0}
    durations.save({"tests/unit/a.py::t": 1.0})  # once this machine has its own figures, they win
    assert durations.known() == {"tests/unit/a.py::t": 1.0, "tests/e2e/b.py::t": 90.0}


def test_every_worker_of_a_run_orders_by_the_figures_of_its_start(files, monkeypatch):
    """A run that ends in another terminal while this run's workers collect changes the cache;
    the workers (which inherit the variable) still order by what the run read at its start."""
    monkeypatch.delenv(durations.SNAPSHOT_VARIABLE, raising=False)
    monkeypatch.setattr(durations, "_held", {})  # this pytest's own run holds its file apart
    durations.save({"tests/e2e/b.py::t": 80.0})
    durations.hold_for_run()
    held = os.environ[durations.SNAPSHOT_VARIABLE]
    durations.save({"tests/e2e/b.py::t": 5.0, "tests/e2e/c.py::t": 60.0})  # the other run ends
    assert durations.for_this_run() == {"tests/e2e/b.py::t": 80.0}
    assert durations.known()["tests/e2e/b.py::t"] == 5.0
    durations.release()
    assert not os.path.exists(held) and durations.SNAPSHOT_VARIABLE not in os.environ
    assert durations.for_this_run() == durations.known()
