"""Run conformance cells inside one engine's venv: the card's launcher, then the engine's greedy ids.

    ENGINE_PYTHON -m harness.engine_worker CELLS.json RESULTS.jsonl

One process per engine generation imports torch and vLLM once; each cell runs in a child forked
from it, so a cell costs the engine's construction and its requests, not the 10-15 s import, and
a cell that crashes (a signal, a hang) costs only itself. A child does what the image's
entrypoint does: the launcher's own preflight (`common.start.launch`: the same plan, repairs, engine
patches and environment), then `vllm serve` with the argv the launcher would exec, parsed by
the engine's own CLI. Only the last step differs: instead of the HTTP server, the parsed
arguments build the engine in the child, which answers one greedy request (the first answer
the platform would get) and exits. A plan that patched the engine's source runs the cell again
in a fresh interpreter, so the patched module is the one imported.

Each result line: {"id", "outcome": "answered" | "refused" | "crashed", "tokens", "error",
"signal", "plan": {"args", "env", "repairs"}, "seconds", "ran_at"}. `refused`: the engine did not come up
(what `vllm serve` exits on before it is ready); `crashed`: it came up and the first request
failed or killed it. The child's whole log goes to the cell's log file, for triage.

Python 3.10: vLLM 0.5.5 runs on it.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from harness import vec_isa

ROOT = Path(__file__).resolve().parents[1]
CELL_TIMEOUT_S = 300
# The engine in the cell's own process: vLLM >= 0.10 otherwise starts its engine core as another
# process (the HTTP server's layout); in-process it computes the same.
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}

# Where each engine generation's `vllm` CLI keeps its entry and its serve step: vLLM 0.6+ (a
# ServeSubcommand whose cmd runs the server), then 0.5.x (vllm/scripts.py's serve()).
CLIS: Tuple[Tuple[str, str, str], ...] = (
    ("vllm.entrypoints.cli.main", "vllm.entrypoints.cli.serve", "ServeSubcommand.cmd"),
    ("vllm.scripts", "vllm.scripts", "serve"),
)


class Refused(Exception):
    """The engine did not come up."""


class Crashed(Exception):
    """The engine came up; the first request failed."""


def preload() -> None:
    """What every cell imports: torch, vLLM and its CLI, and torch's answer to its vector
    instruction probe (harness/vec_isa.py). Nothing here may run torch work (a child forked
    after OpenMP threads started can hang) nor ask torch for CUDA (its forks could not start it).

    Last, what was imported leaves the garbage collector's view: every child forked from here
    would otherwise walk those half a million objects again at each full collection as it builds its
    engine (a quarter to a third of a cell's seconds on two cores). Only when a collection
    happens changes; what the engine computes does not."""
    import torch  # noqa: F401
    import vllm  # noqa: F401

    for main_module, serve_module, _ in CLIS:
        try:
            importlib.import_module(main_module)
            importlib.import_module(serve_module)
            break
        except ImportError:
            continue
    vec_isa.answer_once()
    gc.collect()
    gc.freeze()


def _cli() -> Tuple[Callable[[], Any], Callable[[Callable[[Any], None]], None]]:
    """(the engine's `vllm` main, a function that replaces its serve step)."""
    for main_module, serve_module, attr in CLIS:
        try:
            main = importlib.import_module(main_module).main
            owner = importlib.import_module(serve_module)
        except (ImportError, AttributeError):
            continue
        cls_name, _, name = attr.rpartition(".")
        target = getattr(owner, cls_name) if cls_name else owner

        def replace(fn: Callable[[Any], None], target: Any = target, name: str = name, is_method: bool = bool(cls_name)) -> None:
            setattr(target, name, staticmethod(fn) if is_method else fn)

        return main, replace
    raise RuntimeError("this vLLM has no CLI this worker knows")


def build_engine(args: Any) -> Any:
    """The engine `vllm serve` would build from `args`, as its server does: vLLM 0.5.x's engine
    from the engine arguments; on V1 engines the config first, and, like 0.11's server
    (`assert envs.VLLM_USE_V1` after the config), no V0 engine when the config fell back to it."""
    from vllm.engine.arg_utils import EngineArgs

    engine_args = EngineArgs.from_cli_args(args)
    try:
        from vllm.v1.engine.llm_engine import LLMEngine as V1Engine
    except ImportError:  # vLLM 0.5.x
        from vllm.engine.llm_engine import LLMEngine

        return LLMEngine.from_engine_args(engine_args)
    import vllm.envs as envs
    from vllm.usage.usage_lib import UsageContext

    config = engine_args.create_engine_config(UsageContext.OPENAI_API_SERVER)
    if "VLLM_USE_V1" in dir(envs) and not envs.VLLM_USE_V1:
        raise RuntimeError(
            "the config fell back to the V0 engine, which `vllm serve` of this version does not run (assert envs.VLLM_USE_V1)"
        )
    return V1Engine.from_vllm_config(config, UsageContext.OPENAI_API_SERVER)


def answer(args: Any, prompt: List[int], count: int) -> List[int]:
    """Build the engine from `vllm serve`'s parsed arguments, then one greedy request."""
    from vllm import SamplingParams

    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    try:
        engine = build_engine(args)
    except BaseException as exc:  # noqa: B902 - SystemExit included: the start failed
        raise Refused(f"{type(exc).__name__}: {exc}") from exc
    print("conformance: engine ready", flush=True)
    params = SamplingParams(temperature=0.0, max_tokens=count, ignore_eos=True)
    tokens: Optional[List[int]] = None
    try:
        engine.add_request("conformance-0", {"prompt_token_ids": list(prompt)}, params)
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    tokens = list(out.outputs[0].token_ids)
    except BaseException as exc:  # noqa: B902
        raise Crashed(f"{type(exc).__name__}: {exc}") from exc
    if tokens is None:
        raise Crashed("the request finished without an answer")
    return tokens


# start key -> the result of the cell that made that start: a later cell whose launcher makes the
# very same start (another card whose plan is the same) is that cell's result. A forked child
# sees the parent's table as it was at the fork.
STARTS: Dict[str, Dict[str, Any]] = {}


def start_key(argv: List[str], env: Dict[str, str], work_dir: Optional[str]) -> str:
    """What decides what the engine computes: its argv and the plan's environment, with the run's
    own work dir named by the content of the files the plan wrote there."""
    import hashlib

    h = hashlib.sha256()
    text = json.dumps([argv, sorted(env.items())])
    if work_dir:
        text = text.replace(work_dir, "<work>")
        for path in sorted(Path(work_dir).rglob("*")):
            if path.is_file() and path.name != "report.json":
                h.update(str(path.relative_to(work_dir)).encode() + b"\0" + path.read_bytes())
    h.update(text.encode())
    return h.hexdigest()[:16]


def run_cell(cell: Dict[str, Any], fd: int, fresh: bool, summary: Dict[str, Any]) -> Dict[str, Any]:
    """One cell in this process: the launcher's preflight, then the engine. Returns the result,
    or re-executes this interpreter (never returns) when the plan patched the engine's source.
    `summary` gets the plan as soon as it is known (a refusal still reports it)."""
    from common.start.launch import _planned, vllm_argv

    start_env = dict(cell["env"], **IN_PROCESS, **cell.get("pin", {}))
    os.environ.clear()
    os.environ.update(start_env)
    model_dir, user_args = cell["model"], list(cell["args"])
    plan = _planned(model_dir, user_args, os.environ)
    patched = plan is not None and any(r.engine_patch is not None and r.verified for r in plan.repairs)
    if patched:
        summary["patched"] = [r.engine_patch[0] for r in plan.repairs if r.engine_patch is not None and r.verified]
    if patched and not fresh:
        path = Path(cell["log"]).with_suffix(".cell.json")
        path.write_text(json.dumps(cell))
        sys.stdout.flush()
        os.set_inheritable(fd, True)  # the fresh interpreter answers on the same pipe
        os.execv(sys.executable, [sys.executable, "-m", "harness.engine_worker", "--fresh", str(path), str(fd)])
    argv = vllm_argv(model_dir, plan, user_args)
    # What the launcher execs vLLM with: the environment the container started with (the cell's;
    # not this process's own start environment, which launch.original_environ would read), plus
    # the plan's variables.
    env = dict(start_env)
    if plan is not None:
        env.update(plan.env)
    os.environ.clear()
    os.environ.update(env)
    # A plugin directory the plan puts on PYTHONPATH is found through sys.path in this process.
    for entry in reversed((plan.env.get("PYTHONPATH", "") if plan else "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    # R12's config classes: the image's Python registers them at interpreter start (the plugin
    # directory's sitecustomize); this child's interpreter started long before, so it does it now,
    # still before vLLM reads config.json.
    if env.get("COMPAT_CONFIGS"):
        import compat_configs

        compat_configs.register(compat_configs.parse(env["COMPAT_CONFIGS"]))
    summary.update(argv=argv[1:], env=dict(plan.env) if plan else {}, repairs=[r.code for r in plan.repairs if r.verified] if plan else [])
    summary["start"] = key = start_key(argv[1:], summary["env"], plan.work_dir if plan else None)
    print("conformance: vllm " + " ".join(argv[1:]), flush=True)
    if key in STARTS:
        same = STARTS[key]
        print(f"conformance: the same start as {same['id']}", flush=True)
        return {k: v for k, v in same.items() if k in ("outcome", "tokens", "error", "signal")} | {"same_start_as": same["id"]}

    main, replace = _cli()
    got: Dict[str, Any] = {}

    def serve(args: Any) -> None:
        got["tokens"] = answer(args, cell["prompt"], cell["count"])

    replace(serve)
    sys.argv = ["vllm"] + argv[1:]
    try:
        main()
    except (Refused, Crashed):
        raise
    except BaseException as exc:  # noqa: B902 - argparse's SystemExit: `vllm serve` exits here
        raise Refused(f"{type(exc).__name__}: {exc}") from exc
    return {"outcome": "answered", "tokens": got.get("tokens")}


def _child(cell: Dict[str, Any], fd: int, fresh: bool) -> None:
    """The forked (or fresh) cell process: its output to the cell's log, its result to `fd`."""
    log = os.open(cell["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(str(ROOT))
    start = time.monotonic()
    ran_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    summary: Dict[str, Any] = {}
    try:
        result = run_cell(cell, fd, fresh, summary)
    except Refused as exc:
        traceback.print_exc()
        result = {"outcome": "refused", "error": str(exc)[-2000:]}
    except Crashed as exc:
        traceback.print_exc()
        result = {"outcome": "crashed", "error": str(exc)[-2000:]}
    except BaseException as exc:  # noqa: B902 - a bug of the worker is the cell's error, never a hang
        traceback.print_exc()
        result = {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"[-2000:]}
    result["seconds"] = round(time.monotonic() - start, 2)
    result["ran_at"] = ran_at
    result["plan"] = summary
    if fresh:
        restore(summary.get("patched", ()))
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(fd, json.dumps(result).encode())
    os.close(fd)


def restore(modules: Any) -> None:
    """Put the engine's files a cell's plan patched (H1's start-time edit) back as they were:
    the image patches its own copy at every start; the engine venv here is shared by every
    cell and test after this one."""
    from common.engine.patching import BACKUP_SUFFIX, module_file

    for module in modules:
        path = module_file(module)
        backup = path + BACKUP_SUFFIX
        if os.path.exists(backup):
            os.replace(backup, path)
            print(f"conformance: {path} restored from its backup", flush=True)


def _forked(cell: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _child(cell, write, fresh=False)
        finally:
            os._exit(0)
    os.close(write)
    return _collect(pid, read, timeout)


def _collect(pid: int, read: int, timeout: float) -> Dict[str, Any]:
    """The child's result, or what its end says: a signal, a hang past `timeout`."""
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read], [], [], left)
        if not ready:
            continue
        chunk = os.read(read, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    if timed_out:
        _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    if chunks:
        try:
            return json.loads(b"".join(chunks))
        except ValueError:
            pass
    if timed_out:
        return {"outcome": "crashed", "error": f"no answer in {timeout:g}s", "signal": "timeout"}
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return {"outcome": "crashed", "error": f"the engine process died of {name}", "signal": name}
    return {"outcome": "crashed", "error": f"the engine process exited {os.WEXITSTATUS(status)} without a result"}


def _kill_group(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError:
            return
        time.sleep(2)


def main(argv: List[str]) -> int:
    if argv[0] == "--fresh":  # a cell again in a fresh interpreter: its parent waits on fd
        _child(json.loads(Path(argv[1]).read_text()), int(argv[2]), fresh=True)
        return 0
    spec = json.loads(Path(argv[0]).read_text())
    sys.path.insert(0, str(ROOT))
    preload()
    with open(argv[1], "a", encoding="utf-8") as out:
        for cell in spec["cells"]:
            cell = dict(cell, pin=spec.get("pin", {}))
            result = _forked(cell, spec.get("timeout", CELL_TIMEOUT_S))
            result["id"] = cell["id"]
            start = (result.get("plan") or {}).get("start")
            if start and start not in STARTS and "same_start_as" not in result:
                STARTS[start] = result
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(f"conformance: {cell['id']}: {result['outcome']} ({result.get('seconds', '?')} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
