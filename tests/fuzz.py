"""make fuzz: the property-based suite (tests/integration/test_fuzz_plan.py) at FUZZ_EXAMPLES random examples
per property (default 3500, three properties: 10,500 in all; `make test` runs 120 per property,
with a seed of its own each run).

Prints `fuzz_seed: N` first (each run draws new inputs; FUZZ_SEED=N replays them), then
`fuzz_examples: N` (example bodies run, the issue's explicit cases and any shrinking included),
`fuzz_failures: N` (failing properties) and `fuzz_seconds: N`; exits 1 on a failure.
"""

import os
import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXAMPLES = 3500


class Failures:
    def __init__(self) -> None:
        self.count = 0

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.count += 1


def main() -> int:
    os.environ.setdefault("FUZZ_EXAMPLES", str(DEFAULT_EXAMPLES))
    os.environ.setdefault("FUZZ_SEED", str(secrets.randbelow(2**32)))
    print(f"fuzz_seed: {os.environ['FUZZ_SEED']} (FUZZ_SEED={os.environ['FUZZ_SEED']} make fuzz: the same inputs again)", flush=True)
    sys.path.insert(0, str(ROOT))
    import pytest

    failures = Failures()
    start = time.monotonic()
    code = pytest.main([str(ROOT / "tests" / "integration" / "test_fuzz_plan.py"), "-q", "-p", "no:cacheprovider"], plugins=[failures])
    from tests.integration.test_fuzz_plan import COUNT

    print(f"fuzz_examples: {COUNT['examples']}")
    print(f"fuzz_failures: {failures.count}")
    print(f"fuzz_seconds: {time.monotonic() - start:.0f}")
    return 0 if code == 0 and failures.count == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
