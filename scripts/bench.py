"""make bench: preflight speed figures, each a ratio measured side by side in one run.

preflight_clean_vs_python_startup      dry-run preflight of a clean model / `python -c pass` (goal <= 2.0)
preflight_vs_import_transformers       the same preflight / `python -c "import transformers"` (what the
                                       seed images paid at every start)
preflight_size_ratio_100gib_vs_empty   preflight of a model with 100 GiB of sparse shards / with none
                                       (goal <= 1.1)
preflight_read_bytes_delta_100gib      bytes the preflight read with the shards present minus without
                                       (goal 0: weights are never opened)
launch_clean_vs_python_startup         `common launch` on a clean model until it execs vLLM (here `true`)
                                       / `python -c pass`: what a container start pays

The runtime package is byte-compiled first, as the image build does.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
SHARDS = 50
SHARD_BYTES = 100 * 1024 ** 3 // SHARDS


def clean_model(path: Path, shards: int = 0) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_attention_heads": 32, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}))
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


def timed(cmd: List[str], env: Dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def medians(cases: Dict[str, Callable[[], float]]) -> Dict[str, float]:
    """Interleave the cases run by run, so machine noise hits them alike."""
    samples: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(RUNS):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


READ_BYTES = (
    "import json, os, sys; from common.preflight import build_plan; "
    "build_plan(sys.argv[1], 'nv-a100', [], os.environ); "
    "print([l.split()[1] for l in open('/proc/self/io') if l.startswith('rchar')][0])"
)


def read_bytes(model: Path, env: Dict[str, str]) -> int:
    out = subprocess.run([sys.executable, "-c", READ_BYTES, str(model)], cwd=str(ROOT), env=env,
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1])


def main() -> int:
    py = sys.executable
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "common")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        small = clean_model(Path(tmp) / "clean")
        big = clean_model(Path(tmp) / "clean-100gib", SHARDS)
        env = dict(os.environ, COMPAT_WORK_DIR=str(Path(tmp) / "work"), TRANSFORMERS_VERBOSITY="error")

        def preflight(model: Path) -> Callable[[], float]:
            return lambda: timed([py, "-m", "common", "preflight", str(model), "--card", "nv-a100",
                                  "--dry-run", "--json"], env)

        m = medians({
            "python": lambda: timed([py, "-c", "pass"], env),
            "import_transformers": lambda: timed([py, "-c", "import transformers"], env),
            "preflight": preflight(small),
            "preflight_100gib": preflight(big),
            "launch": lambda: timed([py, "-m", "common", "launch", "--", "--port", "8000"],
                                    dict(env, MODEL_DIR=str(small), COMPAT_CARD="nv-a100", COMPAT_VLLM="true")),
        })
        delta = read_bytes(big, env) - read_bytes(small, env)
    print(f"python_startup_ms: {m['python'] * 1000:.1f}")
    print(f"preflight_clean_ms: {m['preflight'] * 1000:.1f}")
    print(f"preflight_clean_vs_python_startup: {m['preflight'] / m['python']:.2f}")
    print(f"preflight_vs_import_transformers: {m['preflight'] / m['import_transformers']:.2f}")
    print(f"preflight_size_ratio_100gib_vs_empty: {m['preflight_100gib'] / m['preflight']:.2f}")
    print(f"preflight_read_bytes_delta_100gib: {delta}")
    print(f"launch_clean_vs_python_startup: {m['launch'] / m['python']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
