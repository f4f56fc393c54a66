"""`make demo` as a newcomer runs it: scripts/demo.py on the card's real engine on the CPU.

It shows the image's main job end to end: a transformers-5 model the engine refuses untouched
(the engine's own error), the same model started through the image's entrypoint with the
repairs' log lines, a chat answer, greedy tokens equal to the author's, and doctor's verdict;
and it writes nothing into the checkout outside build/.
"""

import subprocess
import sys

import pytest

from harness.engine import ENGINE_055, ENGINE_0110, ROOT
from harness.starts import record

pytestmark = pytest.mark.e2e

CARDS = {
    "nv-a100": (ENGINE_0110, "vLLM 0.11.0"),
    "iluvatar-bi100": (ENGINE_055, "vLLM 0.5.5"),
}


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=str(ROOT), capture_output=True, text=True).stdout


@pytest.mark.parametrize("card", sorted(CARDS))
def test_make_demo_serves_a_model_the_engine_refuses_with_its_authors_tokens(card):
    engine, vllm = CARDS[card]
    if not engine.available():
        pytest.skip(engine.missing_reason)
    before = git_status()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--card", card], cwd=str(ROOT), capture_output=True, text=True, timeout=900
    )
    record("server", 2)  # the demo's two starts: untouched, then through the entrypoint
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    # 1. untouched, the engine's own refusal in one line, read by triage
    assert "the engine's error: ValueError: Tokenizer class TokenizersBackend does not exist" in out, out
    assert "(triage: R3b," in out, out
    # 2. through the image's entrypoint, the repairs said on their log lines
    for code in ("R3", "R3b", "R5"):
        assert f"    [compat] {code} " in out, out
    assert "[compat] exec vllm serve" in out, out
    # 3. and 4. a chat answer, and the author's greedy tokens
    assert "one chat completion: HTTP 200, the answer" in out, out
    assert "served vs the author's transformers 5: equal" in out, out
    # 5. doctor's verdict for the card's own engine
    assert f"{card}, {vllm}: starts" in out, out
    assert "served through the image with the author's tokens: yes" in out, out
    # Nothing written into the checkout outside build/ (ignored): the same status as before.
    assert git_status() == before
