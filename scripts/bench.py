"""make bench: preflight speed figures, each a ratio measured side by side in one run.

preflight_clean_vs_python_startup      dry-run preflight of a clean model / `python -c pass` (goal <= 2.0)
preflight_vs_import_transformers       the same preflight / `python -c "import transformers"` (what the
                                       seed images paid at every start)
preflight_size_ratio_100gib_vs_empty   preflight of a model with 100 GiB of sparse shards / with none
                                       (goal <= 1.1)
preflight_read_bytes_delta_100gib      bytes the preflight read with the shards present minus without
                                       (goal 0: weights are never opened)
preflight_moe_metadata_bytes           for an MoE checkpoint stored fused (R8) in 50 sparse 2 GiB shards:
                                       its index plus the one safetensors header R8 reads (8-byte
                                       length + JSON): metadata
preflight_moe_read_beyond_metadata     bytes that preflight read with the shards present minus without,
                                       minus that metadata (goal 0: no weight byte is read)
launch_clean_vs_python_startup         `common launch` on a clean model until it execs vLLM (here `true`)
                                       / `python -c pass`: what a container start pays (goal <= 2.5,
                                       every rule in place)

With the vLLM 0.11.0 engine venv (.venv-engine) and .venv-author (`make envs`), for a model saved
by transformers 5 (R3 + R3b: a tokenizer overlay that must be verified), the engine's Python
running both the preflight and the check, as in the image:
preflight_repaired_vs_tokenizer_load   `preflight --dry-run --json`, verification included / the
                                       engine's Python loading that overlay tokenizer without torch:
                                       the floor any verification pays (goal <= 1.3)
preflight_repaired_peak_rss_mb         peak resident memory of that preflight and every process it
                                       starts: the larger of their polled sum and the largest one's
                                       maxrss (goal <= 150)

With the vLLM 0.5.5 engine venv (.venv-engine055), doctor over a folder of 100 metadata-only
models (copies of the committed fixture models, harness/fixtures/models) on iluvatar-bi100, the
card whose engine repairs most of them (so most models have checks to verify):
doctor_models_per_s                    models judged per second by `doctor FOLDER --card
                                       iluvatar-bi100 --json`, the whole command (its engine
                                       process and transformers' import included)
doctor_engine_processes                engine-Python processes that run started (goal 2: per card
                                       for the whole list, one for the checks and one, torch on,
                                       that builds each model's class: MB)

`--tree DIR` measures the runtime package of another checkout (a worktree of an older commit)
with this script and this checkout's venvs. The runtime package is byte-compiled first, as the
image build does.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import bench_cli

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
AUTHOR_PYTHON = ROOT / ".venv-author" / "bin" / "python"
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
SHARDS = 50
SHARD_BYTES = 100 * 1024**3 // SHARDS


def clean_model(path: Path, shards: int = 0) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "rope_theta": 500000.0,
                "torch_dtype": "bfloat16",
            }
        )
    )
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
            }
        )
    )
    (path / "tokenizer.json").write_text(json.dumps({"version": "1.0", "added_tokens": [], "model": {"type": "BPE"}}))
    index = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        with open(path / name, "wb") as fh:
            fh.truncate(SHARD_BYTES)  # sparse: 2 GiB each without touching the disk
        index[f"layer.{i}.weight"] = name
    if shards:
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    return path


def fused_moe_model(path: Path, shards: int = 0) -> Tuple[Path, int]:
    """A Mixtral whose experts are stored fused (R8 reads its index and one header): `shards`
    sparse shards, each a real safetensors header followed by 2 GiB never written. Returns the
    model and the metadata R8 may read: the index and 8 + the first shard's header."""
    path.mkdir(parents=True)
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32}
    config.update(num_local_experts=8, num_experts_per_tok=2, intermediate_size=14336, torch_dtype="bfloat16")
    (path / "config.json").write_text(json.dumps(config))
    index, metadata = {}, 0
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensor = f"model.layers.{i}.mlp.experts.{'gate_up_proj' if i % 2 == 0 else 'down_proj'}"
        shape = [8, 2 * 14336, 4096] if i % 2 == 0 else [8, 4096, 14336]
        header = json.dumps({tensor: {"dtype": "BF16", "shape": shape, "data_offsets": [0, SHARD_BYTES // 2]}}).encode()
        with open(path / name, "wb") as fh:
            fh.write(len(header).to_bytes(8, "little") + header)
            fh.truncate(SHARD_BYTES)
        index[tensor] = name
        if i == 0:
            metadata += 8 + len(header)
    if shards:
        text = json.dumps({"weight_map": index})
        (path / "model.safetensors.index.json").write_text(text)
        metadata += len(text)
    return path, metadata


def timed(cmd: List[str], env: Dict[str, str], cwd: Path = ROOT) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=str(cwd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def medians(cases: Dict[str, Callable[[], float]]) -> Dict[str, float]:
    """Interleave the cases run by run, so machine noise hits them alike."""
    samples: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(RUNS):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


# Bytes a preflight process reads (rchar), every module of the runtime package
# imported first (not the entry points, which run on import): a module a rule imports only for
# the models it concerns is code, not model data.
# The runtime package's groups (common/model/, engine/, ...); an older tree (--tree) has none.
GROUPS = ("model", "engine", "memory", "start", "doctor", "build_checks")
READ_BYTES = (
    "import importlib, os, pkgutil, sys; import common, common.rules, common.vllm_plugin; "
    f"groups = [importlib.import_module('common.' + g) for g in {GROUPS!r} if os.path.isdir('common/' + g)]; "
    "[importlib.import_module(f'{p.__name__}.{m.name}') for p in (common, common.rules, common.vllm_plugin, *groups) "
    "for m in pkgutil.iter_modules(p.__path__) if not m.ispkg and m.name not in ('__main__', 'bootstrap')]; "
    "importlib.import_module('common.start.preflight' if groups else 'common.preflight')"
    ".build_plan(sys.argv[1], 'nv-a100', [], os.environ); "
    "print([l.split()[1] for l in open('/proc/self/io') if l.startswith('rchar')][0])"
)


def read_bytes(model: Path, env: Dict[str, str], tree: Path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", READ_BYTES, str(model)], cwd=str(tree), env=env, capture_output=True, text=True, check=True
    ).stdout
    return int(out.strip().splitlines()[-1])


# Runs the command and prints the largest maxrss among it and every descendant it waited for.
MAXRSS = (
    "import resource, subprocess, sys; "
    "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
PAGE = os.sysconf("SC_PAGE_SIZE")


def _descendants(root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def peak_rss_mb(cmd: List[str], env: Dict[str, str], cwd: Path) -> float:
    """Peak memory of `cmd` and its descendants (the measuring wrapper itself left out)."""
    proc = subprocess.Popen([sys.executable, "-c", MAXRSS] + cmd, cwd=str(cwd), env=env, stdout=subprocess.PIPE, text=True)
    polled = 0
    while proc.poll() is None:
        polled = max(polled, sum(_rss(pid) for pid in _descendants(proc.pid)))
        time.sleep(0.002)
    out = proc.communicate()[0]
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed")
    largest = int(out.strip().splitlines()[-1]) * 1024
    return max(polled, largest) / 1024**2


FLOOR = "import sys; from transformers import AutoTokenizer; AutoTokenizer.from_pretrained(sys.argv[1])"


def repaired_figures(tmp: Path, tree: Path) -> Optional[Dict[str, float]]:
    """Preflight of a transformers-5 model whose repairs need verification, on the engine venv."""
    if not (ENGINE_PYTHON.exists() and AUTHOR_PYTHON.exists()):
        return None
    sys.path.insert(0, str(ROOT))
    from harness.fixtures.factory import build

    model = build("v5", "generic", tmp / "v5-generic")
    engine = str(ENGINE_PYTHON)
    env = dict(os.environ, COMPAT_WORK_DIR=str(tmp / "work-repaired"), TRANSFORMERS_VERBOSITY="error", COMPAT_ENGINE_PYTHON=engine)
    cmd = [engine, "-m", "common", "preflight", str(model), "--card", "nv-a100", "--dry-run", "--json"]
    # This one run keeps its work dir: the floor below loads the overlay it wrote.
    plan = json.loads(subprocess.run(cmd + ["--keep-work-dir"], cwd=str(tree), env=env, capture_output=True, text=True, check=True).stdout)
    repairs = [(r["code"], r["verified"]) for r in plan["repairs"]]
    if not repairs or not all(ok is True for _, ok in repairs) or plan["args"][:1] != ["--tokenizer"]:
        raise RuntimeError(f"the transformers-5 model was not repaired and verified: {repairs}")
    overlay = plan["args"][1]
    torch_off = dict(env, USE_TORCH="0", USE_TF="0", USE_FLAX="0")
    m = medians(
        {
            "preflight_repaired": lambda: timed(cmd, env, tree),
            "tokenizer_load": lambda: timed([engine, "-c", FLOOR, overlay], torch_off, tree),
        }
    )
    peaks = sorted(peak_rss_mb(cmd, env, tree) for _ in range(3))
    return dict(m, peak_rss_mb=peaks[1])


DOCTOR_CARD = "iluvatar-bi100"
DOCTOR_MODELS = 100
DOCTOR_PYTHON = ROOT / ".venv-engine055" / "bin" / "python"


def doctor_folder(path: Path, count: int) -> Path:
    """A folder of `count` metadata-only model folders: the committed fixture models in turn."""
    import shutil

    fixtures = ROOT / "harness" / "fixtures" / "models"
    kinds = sorted(p for p in fixtures.iterdir() if p.is_dir())
    path.mkdir(parents=True)
    for i in range(count):
        kind = kinds[i % len(kinds)]
        shutil.copytree(kind, path / f"model-{i:03d}-{kind.name}")
    return path


def doctor_figures(tmp: Path, tree: Path) -> Optional[Dict[str, float]]:
    """doctor over DOCTOR_MODELS models on DOCTOR_CARD: seconds (median) and engine processes per run."""
    if not DOCTOR_PYTHON.exists() or not any((tree / "common" / p).exists() for p in ("doctor/doctor_many.py", "doctor_many.py")):
        return None
    folder = doctor_folder(tmp / "submissions", DOCTOR_MODELS)
    starts = tmp / "engine-starts"
    counting = tmp / "engine-python"  # the engine's Python, counting its starts
    counting.write_text(f'#!/bin/sh\necho start >> "{starts}"\nexec "{DOCTOR_PYTHON}" "$@"\n')
    counting.chmod(0o755)
    env = dict(os.environ, COMPAT_ENGINE_PYTHON=str(counting), COMPAT_WORK_DIR=str(tmp / "work-doctor"))
    cmd = [sys.executable, "-m", "common", "doctor", str(folder), "--card", DOCTOR_CARD, "--json"]
    runs = max(3, RUNS // 5)
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=str(tree), env=env, capture_output=True, text=True)
        seconds.append(time.perf_counter() - start)
        rows = json.loads(proc.stdout)["rows"]
        if len(rows) != DOCTOR_MODELS or any(r["verdict"] != "starts" for r in rows):
            raise RuntimeError(f"doctor did not judge every model as starting: {proc.stderr[-2000:]}")
    return {"seconds": statistics.median(seconds), "processes": len(starts.read_text().splitlines()) / runs}


def main() -> bench_cli.Figures:
    parser = bench_cli.parser(__doc__)
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose runtime package is measured")
    tree = parser.parse_args().tree.resolve()
    py = sys.executable
    subprocess.run([py, "-m", "compileall", "-q", str(tree / "common")], check=True)
    if ENGINE_PYTHON.exists():  # the image compiles with its own Python: its caches are the ones read
        subprocess.run([str(ENGINE_PYTHON), "-m", "compileall", "-q", str(tree / "common")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        small = clean_model(Path(tmp) / "clean")
        big = clean_model(Path(tmp) / "clean-100gib", SHARDS)
        env = dict(os.environ, COMPAT_WORK_DIR=str(Path(tmp) / "work"), TRANSFORMERS_VERBOSITY="error")

        def preflight(model: Path) -> Callable[[], float]:
            return lambda: timed([py, "-m", "common", "preflight", str(model), "--card", "nv-a100", "--dry-run", "--json"], env, tree)

        m = medians(
            {
                "python": lambda: timed([py, "-c", "pass"], env),
                "import_transformers": lambda: timed([py, "-c", "import transformers"], env),
                "preflight": preflight(small),
                "preflight_100gib": preflight(big),
                "launch": lambda: timed(
                    [py, "-m", "common", "launch", "--", "--port", "8000"],
                    dict(env, MODEL_DIR=str(small), COMPAT_CARD="nv-a100", COMPAT_VLLM="true"),
                    tree,
                ),
            }
        )
        delta = read_bytes(big, env, tree) - read_bytes(small, env, tree)
        moe_small, _ = fused_moe_model(Path(tmp) / "moe")
        moe_big, moe_metadata = fused_moe_model(Path(tmp) / "moe-100gib", SHARDS)
        moe_delta = read_bytes(moe_big, env, tree) - read_bytes(moe_small, env, tree)
        repaired = repaired_figures(Path(tmp), tree)
        doctor = doctor_figures(Path(tmp), tree)
    return {
        "python_startup_ms": f"{m['python'] * 1000:.1f}",
        "preflight_clean_ms": f"{m['preflight'] * 1000:.1f}",
        "preflight_clean_vs_python_startup": f"{m['preflight'] / m['python']:.2f}",
        "preflight_vs_import_transformers": f"{m['preflight'] / m['import_transformers']:.2f}",
        "preflight_size_ratio_100gib_vs_empty": f"{m['preflight_100gib'] / m['preflight']:.2f}",
        "preflight_read_bytes_delta_100gib": delta,
        "preflight_moe_metadata_bytes": moe_metadata,
        "preflight_moe_read_beyond_metadata": moe_delta - moe_metadata,
        "launch_clean_vs_python_startup": f"{m['launch'] / m['python']:.2f}",
        **bench_cli.skipped(
            "preflight_repaired",
            "needs .venv-engine and .venv-author: make envs",
            None
            if repaired is None
            else {
                "preflight_repaired_ms": f"{repaired['preflight_repaired'] * 1000:.1f}",
                "tokenizer_load_torch_free_ms": f"{repaired['tokenizer_load'] * 1000:.1f}",
                "preflight_repaired_vs_tokenizer_load": f"{repaired['preflight_repaired'] / repaired['tokenizer_load']:.2f}",
                "preflight_repaired_peak_rss_mb": f"{repaired['peak_rss_mb']:.0f}",
            },
        ),
        **bench_cli.skipped(
            "doctor",
            "needs .venv-engine055: make envs; and doctor over many models in the measured tree",
            None
            if doctor is None
            else {
                f"doctor_{DOCTOR_MODELS}_models_s": f"{doctor['seconds']:.2f}",
                "doctor_models_per_s": f"{DOCTOR_MODELS / doctor['seconds']:.1f}",
                "doctor_engine_processes": f"{doctor['processes']:g}",
            },
        ),
    }


if __name__ == "__main__":
    bench_cli.run(main)
