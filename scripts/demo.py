"""make demo [CARD=nv-a100]: the image's main job, in front of you, on the card's real engine.

A tiny random Llama saved the way transformers 5 saves every model today (`TokenizersBackend`, a
list of `extra_special_tokens`, `rope_parameters`), then:
  1. started untouched (COMPAT_DISABLE=1), as the platform starts it on the card's vendor image:
     the engine's own error, in one line;
  2. started through the image's entrypoint (common/entrypoint.sh, the launcher it execs), with
     the repairs' log lines;
  3. one chat completion, whose answer is printed;
  4. its greedy tokens against those of the author's transformers 5 on the same weights;
  5. doctor's verdict on the model.
The engine is the card's own generation on the CPU (vLLM 0.11.0 for nv-a100 and hygon-k100, 0.5.5
for iluvatar-bi100, 0.32.0 for nv-a100@next): the venv `make test` uses, built on first use with
progress lines. Everything it writes goes under build/demo/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.engine.engines import checkout_venv, make_target  # noqa: E402
from common.engine.profile import load_profile  # noqa: E402

OUT = ROOT / "build" / "demo"
GREEDY_TOKENS = 16
# The author's greedy tokens are transformers' own generate on the saved weights read back in
# float32: the engine computes in float32 too (in the model's bf16 both round differently).
DTYPE_ARGS = ["--dtype", "float32"]
# vLLM 0.5.5 hands token ids back only when started so.
IDS_FLAG_055 = "--return-tokens-as-token-ids"


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


class Heartbeat:
    """A progress line every `every` seconds while a step that takes long runs."""

    def __init__(self, what: Callable[[float], str], every: float = 15.0) -> None:
        self.what, self.every, self.start = what, every, time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self._done.wait(self.every):
            say(self.what(time.monotonic() - self.start))

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.start


def ensure_venvs(card: str) -> None:
    """The author's transformers 5 and the card's engine venv, built by their make targets (cached
    outside the checkout by the hash of their spec: a few seconds once built)."""
    venv = checkout_venv(card)
    targets = ["author-env", make_target(venv)]
    if all((ROOT / v / "bin" / "python").exists() for v in (".venv-author", venv)):
        return
    say(f"building {', '.join(targets)} (the first run downloads the engine stack, several GB, and takes minutes) ...")
    with Heartbeat(lambda s: f"  still building the venvs ({s:.0f} s)", every=30) as beat:
        subprocess.run(["make", "--no-print-directory", *targets], cwd=str(ROOT), check=True, stdout=subprocess.DEVNULL)
    say(f"  venvs ready ({beat.seconds:.0f} s)")


def save_model(model: Path) -> dict:
    from harness.fixtures.factory import author_record, build

    if model.exists():
        shutil.rmtree(model)
    say("saving a tiny random Llama with transformers 5 (.venv-author), with its greedy tokens on the saved weights ...")
    started = time.monotonic()
    build("v5", "generic", model, "--initializer-range", "0.1", "--reference-tokens", str(GREEDY_TOKENS))
    tokenizer = json.loads((model / "tokenizer_config.json").read_text())
    config = json.loads((model / "config.json").read_text())
    say(
        f"  {model.relative_to(ROOT)} ({time.monotonic() - started:.0f} s), as transformers {config.get('transformers_version')} writes it:"
    )
    say(
        f"    tokenizer_config.json: tokenizer_class {tokenizer.get('tokenizer_class')!r}, extra_special_tokens {tokenizer.get('extra_special_tokens')!r}"
    )
    say(f"    config.json: rope_parameters {config.get('rope_parameters')!r}, dtype {config.get('dtype')!r}")
    return author_record(model)


def entrypoint_argv(port: int, engine) -> List[str]:
    """The image's entrypoint with the platform's arguments (the card engine's own, here)."""
    ids = [IDS_FLAG_055] if engine.version == "0.5.5" else []
    return [str(ROOT / "common" / "entrypoint.sh"), *engine.serve_args_for(port), *DTYPE_ARGS, *ids]


def entrypoint_env(engine, card: str, model: Path, work: Path, disable: bool) -> dict:
    """What the image gives its entrypoint: the model, the card, the engine's Python and vLLM
    (inside the image, its own), and the engine's CPU settings of this machine."""
    extra = {
        "MODEL_DIR": str(model),
        "COMPAT_CARD": card,
        "COMPAT_WORK_DIR": str(work),
        "COMPAT_HOME": str(ROOT),
        "COMPAT_PYTHON": str(engine.python),
        "COMPAT_VLLM": str(engine.bin / "vllm"),
    }
    if disable:
        extra["COMPAT_DISABLE"] = "1"
    return engine.env(extra)


def start(engine, card: str, model: Path, name: str, disable: bool):
    from harness.engine import Server
    from harness.ports import free_port

    port = free_port()
    work = OUT / f"work-{name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return Server(entrypoint_argv(port, engine), entrypoint_env(engine, card, model, work, disable), OUT / f"{name}.log", port, exec_=True)


def wait(srv, engine) -> bool:
    with Heartbeat(lambda s: f"  vLLM {engine.version} is starting ({s:.0f} s; 20-60 s on two cores)") as beat:
        ready = srv.wait_ready()
    say(f"  {'ready' if ready else 'exited'} after {beat.seconds:.0f} s")
    return ready


def engine_error(log_path: Path) -> str:
    """The engine's own error in one line (the line `triage` takes as evidence, else the last
    line that names an error), with the code triage gives it."""
    from common.triage import triage_file

    found = triage_file(str(log_path))
    if found.evidence:
        line = re.sub(r"^\(\w+ pid=\d+\) ", "", found.evidence.strip())  # vLLM's process prefix
        return f"{line}  (triage: {found.code}, {found.title})"
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if "Error" in ln]
    return lines[-1] if lines else "(no error line in its log)"


def served_name(srv, model: Path) -> str:
    """The name vLLM serves the model under (the repairs keep the one it would have given it)."""
    status, models = srv.get("/v1/models")
    return models["data"][0]["id"] if status == 200 and models.get("data") else str(model)


def untouched(engine, card: str, model: Path) -> None:
    say(f"1/5 the model started untouched (COMPAT_DISABLE=1), as vLLM {engine.version} on the card's vendor image starts it ...")
    srv = start(engine, card, model, "untouched", disable=True)
    try:
        if wait(srv, engine):
            say("  it served untouched: the card's engine needs no repair for it")
            return
        say(f"  the engine's error: {engine_error(srv.log_path)}")
    finally:
        srv.stop()


def through_the_image(engine, card: str, model: Path, author: dict) -> bool:
    say("2/5 the same start through the image's entrypoint (common/entrypoint.sh, which runs the preflight and execs vLLM) ...")
    srv = start(engine, card, model, "repaired", disable=False)
    try:
        ready = wait(srv, engine)
        for line in srv.log().splitlines():
            if line.startswith("[compat]"):
                print(f"    {line}", flush=True)
        if not ready:
            say(f"  the repaired start failed: {engine_error(srv.log_path)} (log: {srv.log_path.relative_to(ROOT)})")
            return False
        name = served_name(srv, model)
        status, answer = srv.post(
            "/v1/chat/completions",
            {"model": name, "max_tokens": 12, "temperature": 0, "messages": [{"role": "user", "content": "hello"}]},
        )
        text = answer["choices"][0]["message"]["content"] if status == 200 else json.dumps(answer)[:200]
        say(f"3/5 one chat completion: HTTP {status}, the answer (a random model's words): {text!r}")
        got = srv.greedy_tokens(name, author["reference_prompt"], GREEDY_TOKENS, ids_in_request=engine.version != "0.5.5")
        want = author["reference_tokens"]
        same = sum(a == b for a, b in zip(got, want, strict=False))
        verdict = "equal" if got == want else f"NOT equal ({same}/{len(want)} in place)"
        say(f"4/5 greedy tokens after a {len(author['reference_prompt'])}-token prompt, served vs the author's transformers 5: {verdict}")
        say(f"    served:   {got}")
        say(f"    author's: {want}")
        return status == 200 and got == want
    finally:
        srv.stop()


def doctor(engine, card: str, model: Path) -> Optional[str]:
    """doctor's verdict on the model for the card's own engine (a card with variants reports each;
    the demo's engine is the card's default one)."""
    say(f"5/5 doctor on the model for {card} (checked with {engine.venv}) ...")
    env = dict(os.environ, COMPAT_ENGINE_PYTHON=str(engine.python), COMPAT_WORK_DIR=str(OUT / "work-doctor"))
    proc = subprocess.run(
        [sys.executable, "-m", "common", "doctor", str(model), "--card", card, "--json", "--", "--max-model-len", "256", *DTYPE_ARGS],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        say(f"  doctor gave no verdict: {proc.stderr.strip()[-300:]}")
        return None
    own = (data.get("variants") or {}).get(card, data)
    codes = ", ".join(own["failing"] + own["unverified"])
    cell = f" (conformance cell {own['tokens_cell']})" if own.get("tokens_cell") else ""
    say(f"  {card}, vLLM {own.get('vllm_version', engine.version)}: {own['verdict']}" + (f" ({codes})" if codes else ""))
    say(f"  tokens: {own.get('tokens')}{cell}")
    if own.get("args"):
        say(f"  the image adds: {' '.join(own['args'])}")
    return own["verdict"]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--card", default="nv-a100")
    opts = parser.parse_args(argv)
    card = opts.card
    profile = load_profile(card)  # an unknown card fails here, naming the known ones
    say(f"card {card}: vLLM {profile.vllm_version} on this CPU ({checkout_venv(card)})")
    ensure_venvs(card)
    from harness.engine import card_engine

    engine = card_engine(card, serve_args=("--enforce-eager",) if card.endswith("@next") else ())
    OUT.mkdir(parents=True, exist_ok=True)
    model = OUT / "transformers5-model"
    author = save_model(model)
    untouched(engine, card, model)
    served = through_the_image(engine, card, model, author)
    verdict = doctor(engine, card, model)
    say(f"done: served through the image with the author's tokens: {'yes' if served else 'no'}; logs in {OUT.relative_to(ROOT)}/")
    return 0 if served and verdict == "starts" else 1


if __name__ == "__main__":
    sys.exit(main())
