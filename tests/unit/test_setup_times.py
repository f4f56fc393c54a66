"""The run's last lines say what each step of `make test`'s set-up cost (scripts/timed.sh)."""

import os
import subprocess
from pathlib import Path

from tests import setup_times

ROOT = Path(__file__).resolve().parents[2]


def test_timed_records_each_step_and_keeps_its_exit_status(tmp_path):
    record = tmp_path / "times.tsv"
    env = dict(os.environ, COMPAT_SETUP_TIMES=str(record))
    ok = subprocess.run([str(ROOT / "scripts" / "timed.sh"), "engine-env", "sleep", "0.2"], env=env)
    failed = subprocess.run([str(ROOT / "scripts" / "timed.sh"), "base-engine", "sh", "-c", "exit 3"], env=env)
    assert (ok.returncode, failed.returncode) == (0, 3)
    steps = setup_times.read(str(record))
    assert [(name, status) for name, _, _, status in steps] == [("engine-env", 0), ("base-engine", 3)]
    assert steps[0][2] - steps[0][1] >= 0.2
    # Without the variable the wrapper only runs the step.
    quiet = subprocess.run(
        [str(ROOT / "scripts" / "timed.sh"), "venv", "true"], env={k: v for k, v in env.items() if k != "COMPAT_SETUP_TIMES"}
    )
    assert quiet.returncode == 0 and len(setup_times.read(str(record))) == 2


def test_the_summary_gives_each_step_and_the_wall_time_of_steps_side_by_side(tmp_path):
    record = tmp_path / "times.tsv"
    record.write_text("engine055-env\t100.0\t400.0\t0\nvenv\t100.0\t160.5\t0\nbase-engine\t160.5\t250.0\t1\nhalf-written\t1\n")
    lines = setup_times.summary(setup_times.read(str(record)))
    assert lines[0].startswith("set-up, each step's seconds")
    assert "engine055-env   300.0 s" in lines[1] and "venv" in lines[2] and "60.5 s" in lines[2]
    assert "base-engine" in lines[3] and "(failed: exit 1)" in lines[3]
    assert lines[-1] == "set-up: 300 s from its first step's start to its last one's end"
    assert setup_times.summary([]) == [] and setup_times.read(str(tmp_path / "none")) == []
