"""The suite's own machinery: how `make test` shares the cores between its workers, counts engine
starts against the budget, and tells a start the engine host may fork from one it must exec."""

import os
import time
from pathlib import Path

import pytest

from harness import starts
from harness.cores import bind_string, share
from harness.engine import ENGINES
from harness.engine_host import changed_on_disk, module_mtimes
from harness.engine_hosts import forkable


@pytest.mark.parametrize(
    "index, workers, cores, mine",
    [
        (0, 2, [0, 1], [0]),
        (1, 2, [0, 1], [1]),
        (1, 2, list(range(16)), list(range(8, 16))),
        (0, 3, [0, 1], None),  # fewer cores than workers: nobody is pinned
        (0, 1, [0, 1], None),  # one worker keeps the machine
    ],
)
def test_each_worker_gets_its_own_share_of_the_cores(index, workers, cores, mine):
    assert share(index, workers, cores) == mine


def test_the_engines_are_told_the_same_cores_in_their_own_syntax():
    assert bind_string([3]) == "3"
    assert bind_string(list(range(8))) == "0-7"
    assert bind_string([0, 2, 5]) == "0,2,5"


def test_a_module_over_its_budget_or_without_one_fails_the_run():
    made = [("tests/test_a.py::test_one", "server")] * 3 + [("tests/test_b.py::test_two", "cell"), ("tests/test_b.py::test_two", "probe")]
    assert starts.over_budget(made, {"tests/test_a.py": 3, "tests/test_b.py": 2}) == []
    [over] = starts.over_budget(made, {"tests/test_a.py": 2, "tests/test_b.py": 2})
    assert over.startswith("tests/test_a.py made 3 engine starts (3 server), over its budget of 2")
    [unlisted] = starts.over_budget(made, {"tests/test_a.py": 3})
    assert unlisted.startswith("tests/test_b.py made 2 engine starts (1 cell, 1 probe) and has no line")


def test_every_module_of_the_budget_exists():
    budget = starts.load_budget()
    root = Path(__file__).resolve().parents[2]
    assert budget and all((root / module).is_file() for module in budget), sorted(m for m in budget if not (root / m).is_file())


def test_the_engine_host_forks_vllm_serve_and_the_launcher_and_nothing_else(monkeypatch):
    monkeypatch.delenv("COMPAT_TEST_FORK", raising=False)
    engine = ENGINES["0.11.0"]
    assert forkable(engine.serve_argv_vanilla(Path("/m"), 8000)) == engine.bin
    assert forkable(engine.launcher_argv(8000)) == engine.bin
    assert forkable([str(engine.python), "-m", "common", "doctor", "/m"]) is None
    assert forkable([str(engine.bin / "vllm"), "--version"]) is None
    monkeypatch.setenv("COMPAT_TEST_FORK", "0")
    assert forkable(engine.launcher_argv(8000)) is None


def test_a_module_rewritten_on_disk_sends_the_host_to_a_real_exec(tmp_path, monkeypatch):
    """A start-time patch of the engine's source (H1) rewrites a module the host imported: the
    fork would run the old one, so the launcher's exec must be a real one then."""
    module = tmp_path / "patched_by_a_start.py"
    module.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import patched_by_a_start  # noqa: F401

    mtimes = module_mtimes()
    assert str(module) in mtimes and not changed_on_disk(mtimes)
    time.sleep(0.01)
    module.write_text("X = 2\n")
    os.utime(module, (time.time() + 5, time.time() + 5))
    assert changed_on_disk(mtimes)


def test_hosts_are_no_modules_and_one_per_engine_and_worker():
    """The first test of a worker to start an engine pays for its host, whichever test that is."""
    made = [("tests/test_a.py::test_one", "host"), ("tests/test_a.py::test_one", "server"), ("tests/test_b.py::test_two", "host")]
    assert starts.by_module(made) == {"tests/test_a.py": {"server": 1}}
    assert starts.host_problems(made, workers=1, engines=3) == []
    assert starts.host_problems(made * 2, workers=1, engines=3) == ["4 engine hosts started, more than one per engine (3) and worker (1)"]
    # The run's last line holds the modules' starts against their budget, and names the hosts apart.
    line = starts.summary(made, {"tests/test_a.py": 1})
    assert line == "engine starts: 3 (1 server, 2 host); the modules' budget: 1 (the 2 hosts apart: at most one per engine venv and worker)"
