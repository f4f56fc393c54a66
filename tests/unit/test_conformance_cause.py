"""The cause a conformance cell records for a refusal is the engine's, from this run's log: the
launcher's own lines quote the committed cells (C1 names their causes) and must not come back as
this run's cause."""

from __future__ import annotations

from pathlib import Path

from conformance.matrix import cause, quoted
from conformance.models import CACHE

TOKENIZER = "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported."


def test_the_engine_exception_names_the_cause(tmp_path: Path) -> None:
    log = tmp_path / "cell.log"
    log.write_text("INFO loading\n")
    assert cause(TOKENIZER, log) == ("R3b", TOKENIZER)


def test_an_engine_line_of_the_log_names_it_when_the_exception_does_not(tmp_path: Path) -> None:
    log = tmp_path / "cell.log"
    log.write_text(f"INFO loading\n{TOKENIZER}\nTraceback (most recent call last):\n")
    assert cause("RuntimeError: Engine core initialization failed.", log) == ("R3b", TOKENIZER)


def test_the_launchers_quote_of_a_committed_cause_is_not_this_runs(tmp_path: Path) -> None:
    log = tmp_path / "cell.log"
    log.write_text(f"[compat] C1: the conformance matrix refused this model on this card: {TOKENIZER}\nINFO loading\n")
    assert cause("RuntimeError: Engine core initialization failed.", log) == (None, "RuntimeError: Engine core initialization failed.")


def test_a_log_that_is_gone_leaves_the_exception(tmp_path: Path) -> None:
    assert cause("KeyError: 'rope_theta'", tmp_path / "missing.log") == (None, "KeyError: 'rope_theta'")


def test_a_quoted_cause_names_no_path_of_this_machine() -> None:
    # vLLM 0.11 names the model's directory when it cannot load its image processor.
    line = f"OSError: Can't load image processor for '{CACHE}/models/case-v5-0123/model'. If you were trying"
    assert quoted(line) == "OSError: Can't load image processor for 'models/case-v5-0123/model'. If you were trying"
