"""Session fixtures and hooks of every tier (tests/unit, tests/integration, tests/e2e, tests/images)."""

import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness import starts  # noqa: E402
from tests import durations, setup_times  # noqa: E402
from harness.cores import pin_this_worker  # noqa: E402
from harness.starts import load_budget  # noqa: E402
from harness.fixtures.committed import COMMITTED, VARIANTS  # noqa: E402
from harness.fixtures.factory import build  # noqa: E402


def pytest_addoption(parser):
    # Here, not in tests/images/conftest.py: pytest reads options only from the conftests it loads
    # at start, and a plain `pytest` run loads that one late.
    parser.addoption(
        "--image",
        action="append",
        default=[],
        metavar="CARD=REF",
        help="the image tier (tests/images) tests this image as CARD's instead of building one on the local "
        "bases, e.g. a vendor-based `make build` image before its push; only the given cards' tests run, and "
        "those that need an image built here (serving on the CPU engine, the committed profile, builds on "
        "its base) skip",
    )


# Every test's seconds (setup, call and teardown together), written at the end of a run
# (tests/durations.py: build/test-durations.json, and the next run's order).
_durations: dict = {}


# The run's own temporary base (tmp_path and friends), removed when the run ends: under pytest's
# default base (/tmp/pytest-of-USER/pytest-N) any other pytest on the machine prunes all but the
# three newest numbered dirs, the suite's model directories among them, mid-run.
_own_basetemp: list = []


def _take_basetemp(config) -> None:
    if config.option.basetemp or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # given on the command line, or a worker's (its controller's base, one dir each)
    base = tempfile.mkdtemp(prefix="enginex-compat-pytest-")
    config.option.basetemp = os.path.join(base, "tmp")
    _own_basetemp.append(base)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # One seed for the whole run, drawn here (before pytest-xdist starts its workers, which inherit
    # it): the property tests try new inputs each run, and the header names the seed to replay.
    os.environ.setdefault("FUZZ_SEED", str(secrets.randbelow(2**32)))
    # Likewise the conformance cells a run verifies again (tests/e2e/test_conformance.py).
    os.environ.setdefault("CONFORMANCE_SEED", str(secrets.randbelow(2**32)))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        pin_this_worker(worker, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    else:
        _take_basetemp(config)
        durations.hold_for_run()  # one order for every worker of this run


def pytest_unconfigure(config):
    for base in _own_basetemp:
        shutil.rmtree(base, ignore_errors=True)


def pytest_report_header(config):
    return [
        f"fuzz seed: {os.environ['FUZZ_SEED']} (FUZZ_SEED={os.environ['FUZZ_SEED']} runs the same inputs again)",
        f"conformance sample seed: {os.environ['CONFORMANCE_SEED']} (CONFORMANCE_SEED={os.environ['CONFORMANCE_SEED']} verifies the "
        "same cells again; python -m conformance verify --seed N outside the suite)",
    ]


def _scope(nodeid: str) -> str:
    """The unit pytest-xdist hands one worker whole: the image tier (one registry, one sweep of the
    daemon) and each other module. A module's module-scoped fixtures (an engine start its tests
    share, a batch of saves or reads in an engine's Python) are made once per module run: tests of
    one module handed out apart, between other modules' (the longest-first order puts each test
    by its own seconds), would make them again at every return to the module, on both workers."""
    module = nodeid.split("::", 1)[0]
    return "images" if module.startswith("tests/images/") else module


def _scope_starts(scope: str, budget: dict) -> int:
    if scope == "images":
        return sum(n for m, n in budget.items() if m.startswith("tests/images/"))
    return budget.get(scope, 0)


def pytest_collection_modifyitems(session, config, items):
    # The longest scopes first (tests/durations.py says how long), so that the many short tests
    # fill in beside them at the end instead of one long scope ending the run alone on one worker
    # (`make test`: two workers). Every worker sorts the same collection by the same figures.
    budget = load_budget()
    scope_of = {item.nodeid: _scope(item.nodeid) for item in items}
    members: dict = {}
    for nodeid, scope in scope_of.items():
        members.setdefault(scope, []).append(nodeid)
    seconds = durations.scope_seconds(members, {s: _scope_starts(s, budget) for s in members}, durations.for_this_run())
    items.sort(key=lambda item: -seconds[scope_of[item.nodeid]])  # stable: a scope stays together


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        """pytest-xdist's scope scheduling over `_scope`'s units, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False  # the order of the collection is the one wanted
    return TierScheduling(config, log)


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


# Engine starts (harness/starts.py): each worker sends its own back to the controller when it ends.
_worker_starts: list = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _worker_starts.extend(tuple(x) for x in getattr(node, "workeroutput", {}).get("engine_starts", ()))


def _all_starts() -> list:
    return starts.recorded() + _worker_starts


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    budget = load_budget()
    for line in setup_times.summary(setup_times.read(os.environ.get("COMPAT_SETUP_TIMES"))):
        terminalreporter.write_line(line)
    terminalreporter.write_line(starts.summary(_all_starts(), budget))
    for problem in _budget_problems(config, budget):
        terminalreporter.write_line(f"ENGINE START BUDGET: {problem}", red=True)


def _budget_problems(config, budget: dict) -> list:
    from harness.engine import ENGINES

    try:
        workers = int(getattr(config.option, "numprocesses", None) or 1)
    except (TypeError, ValueError):  # "auto", "logical"
        workers = os.cpu_count() or 1
    return starts.over_budget(_all_starts(), budget) + starts.host_problems(_all_starts(), workers, len(ENGINES))


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session.config.workeroutput["engine_starts"] = starts.recorded()
        return
    if _budget_problems(session.config, load_budget()) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # what the budget says is in the summary
    durations.release()
    if _durations:
        durations.save(_durations)


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """The committed tiny models (harness/fixtures/models: metadata only, saved by their authors'
    transformers), copied once per session so no test can touch the committed files."""
    base = tmp_path_factory.mktemp("models")
    cache = {}

    def get(name: str) -> Path:
        if name not in cache:
            if name not in VARIANTS:
                raise KeyError(f"no committed fixture model {name!r} (have: {', '.join(VARIANTS)})")
            shutil.copytree(COMMITTED / name, base / name)
            shutil.copy(COMMITTED / f"{name}.author.json", base / f"{name}.author.json")
            cache[name] = base / name
        return cache[name]

    return get


@pytest.fixture(scope="session")
def served_models(tmp_path_factory):
    """The same tiny models with weights, built once per session on demand by their authors'
    transformers (needs `make author-env`): what the real-engine tests serve."""
    base = tmp_path_factory.mktemp("served")
    cache = {}

    def get(name: str) -> Path:
        if name not in cache:
            saved_by, style, options = VARIANTS[name]
            cache[name] = build(saved_by, style, base / name, *options)
        return cache[name]

    return get


@pytest.fixture
def fake_vllm(tmp_path):
    """A `vllm` on PATH that records the argv and environment it was exec'd with."""
    record = tmp_path / "vllm-called.json"
    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps({{'argv': sys.argv, 'env': dict(os.environ)}}) + '\\n')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def called():
        """The last call's argv and environment, or None when vllm was never started."""
        lines = record.read_text().splitlines() if record.exists() else []
        return json.loads(lines[-1]) if lines else None

    called.count = lambda: len(record.read_text().splitlines()) if record.exists() else 0
    return script, called


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def env_for_tests(fake_vllm, tmp_path):
    """Environment for running the launcher against a fake vllm and the dev venv's transformers."""
    script, _ = fake_vllm
    env = dict(os.environ)
    env["PATH"] = f"{script.parent}{os.pathsep}{env['PATH']}"
    env["COMPAT_ENGINE_PYTHON"] = sys.executable  # .venv: transformers 4.57, as on nv-a100
    # doctor finds the checkout's engine venv of a variant by itself (.venv-engine-next for
    # nv-a100@next) where no variable names one: these tests judge the card's default engine
    # alone, whatever venvs this checkout has built, unless a test names the variant's Python.
    env["COMPAT_ENGINE_PYTHON_NEXT"] = os.path.join(os.sep, "nonexistent", "engine-next", "python")
    # .venv has no vLLM: doctor's model build (MB, common/doctor/model_build_finding.py) is the real-engine
    # tests' (tests/e2e/test_model_build_vs_engine.py); here it would only say "unverified".
    env["COMPAT_SKIP"] = "MB"
    env["COMPAT_WORK_DIR"] = str(tmp_path / "work")
    env["COMPAT_CARD"] = "nv-a100"
    env.pop("COMPAT_DISABLE", None)
    return env
