"""Build-time library patches on the real installed libraries.

Each test runs apply_patches.py the way the image build does, under a real interpreter whose
package is "shadowed": a temporary package directory of symlinks to the installed one, with only
the patched file copied, first on PYTHONPATH. The shared venvs stay untouched.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.fixtures.factory import author_record

ROOT = Path(__file__).resolve().parents[2]
# transformers 4.55.4: the BI-100 engine venv (its card's Python 3.10 too); 4.57: the dev venv.
VENVS = {"4.55": ROOT / ".venv-engine055", "4.57": ROOT / ".venv", "5": ROOT / ".venv-author"}


# The make target that builds each venv, for the skip message when one is missing.
MAKE_TARGET = {".venv-engine055": "engine055-env", ".venv": "venv", ".venv-author": "author-env", ".venv-engine": "engine-env"}


def require(venv: Path) -> Path:
    """`venv`, or a skip that names the make target building it."""
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"{venv.name} is missing: run `make {MAKE_TARGET.get(venv.name, 'envs')}`")
    return venv


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def shadow_package(venv: Path, package: str, relfile: str, dest: Path) -> Path:
    """dest/<package>: symlinks to the installed package, `relfile` copied so it can be patched."""
    real = site_packages(venv) / package
    for root, dirs, files in os.walk(real):
        rel = Path(root).relative_to(real)
        (dest / package / rel).mkdir(parents=True, exist_ok=True)
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            target = dest / package / rel / name
            if (rel / name).as_posix() == relfile:
                target.write_bytes((Path(root) / name).read_bytes())
            else:
                target.symlink_to(Path(root) / name)
    return dest / package / relfile


def run(venv: Path, shadow: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=f"{shadow}{os.pathsep}{ROOT}", HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore"
    )
    return subprocess.run([str(venv / "bin" / "python"), *args], capture_output=True, text=True, env=env, timeout=300)


LOAD = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
names = json.loads(sys.argv[2])
print(json.dumps({"ids": {t: tok.convert_tokens_to_ids(t) for t in names},
                  "special": sorted(tok.all_special_tokens), "probe": tok.encode(sys.argv[3], add_special_tokens=False)}))
"""


@pytest.mark.parametrize("version", ["4.55", "4.57"])
def test_l1_loads_a_transformers5_list_tokenizer_with_the_authors_ids(version, models, tmp_path):
    venv = require(VENVS[version])
    model = models("v5-qwen2")  # Qwen2Tokenizer is known to 4.x: only the list form breaks it
    author = author_record(model)
    target = shadow_package(venv, "transformers", "tokenization_utils_base.py", tmp_path / "shadow")
    original = target.read_bytes()
    names = json.dumps(sorted(author["special_ids"]))

    before = run(venv, tmp_path / "shadow", "-c", LOAD, str(model), names, author["probe"])
    assert before.returncode != 0
    assert "'list' object has no attribute 'keys'" in before.stderr

    first = run(venv, tmp_path / "shadow", "-m", "compat_build.image_steps.apply_patches", "L1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("L1 applied: ") and str(target) in first.stdout
    patched = target.read_bytes()
    assert Path(str(target) + ".enginex-orig").read_bytes() == original

    after = run(venv, tmp_path / "shadow", "-c", LOAD, str(model), names, author["probe"])
    assert after.returncode == 0, after.stderr
    loaded = json.loads(after.stdout)
    assert loaded["ids"] == author["special_ids"]
    assert loaded["probe"] == author["probe_ids"]
    listed = json.loads((model / "tokenizer_config.json").read_text())["extra_special_tokens"]
    assert set(listed) <= set(loaded["special"])  # still special tokens, not plain text

    second = run(venv, tmp_path / "shadow", "-m", "compat_build.image_steps.apply_patches", "L1")
    assert second.returncode == 0 and second.stdout.startswith("L1 unchanged: ")
    assert target.read_bytes() == patched
    assert Path(str(target) + ".enginex-orig").read_bytes() == original


def test_l1_keeps_dict_extra_special_tokens_working(models, tmp_path):
    """A tokenizer saved by 4.57 itself (dict or no extras) must load exactly as before."""
    venv = VENVS["4.57"]
    model = models("457-generic")
    author = author_record(model)
    shadow_package(venv, "transformers", "tokenization_utils_base.py", tmp_path / "shadow")
    assert run(venv, tmp_path / "shadow", "-m", "compat_build.image_steps.apply_patches", "L1").returncode == 0
    after = run(venv, tmp_path / "shadow", "-c", LOAD, str(model), json.dumps(sorted(author["special_ids"])), author["probe"])
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["ids"] == author["special_ids"]


def test_l1_on_a_library_without_the_anchor_fails_the_build_naming_file_and_anchor(tmp_path):
    """transformers 5 rewrote the function: the required patch must stop the build, loudly."""
    venv = VENVS["5"]
    target = shadow_package(venv, "transformers", "tokenization_utils_base.py", tmp_path / "shadow")
    original = target.read_bytes()
    result = run(venv, tmp_path / "shadow", "-m", "compat_build.image_steps.apply_patches", "L1")
    assert result.returncode == 1
    assert "L1 FAILED" in result.stderr and str(target) in result.stderr and "anchor missing" in result.stderr
    assert "Traceback" not in result.stderr
    assert target.read_bytes() == original and not Path(str(target) + ".enginex-orig").exists()


ENGINE = ROOT / ".venv-engine"
TRITON = "v1/attention/backends/triton_attn.py"


def test_l2_decision_on_real_vllm_0_11_triton_backend(tmp_path):
    """Evidence for "no card on vLLM 0.11.0 needs L2": the real Triton check rejects only sizes
    below 32, and the L2 check step passes on the real file without changing it."""
    target = shadow_package(require(ENGINE), "vllm", TRITON, tmp_path / "shadow")
    original = target.read_bytes()
    probe = (
        "from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend as T\n"
        "bad = []\n"
        "for size in range(1, 513):\n"
        "    try:\n        T.validate_head_size(size)\n"
        "    except ValueError:\n        bad.append(size)\n"
        "print(min(bad), max(bad), len(bad))\n"
    )
    checked = run(ENGINE, tmp_path / "shadow", "-c", probe)
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert checked.stdout.split()[-3:] == ["1", "31", "31"]
    result = run(ENGINE, tmp_path / "shadow", "-m", "compat_build.image_steps.apply_patches", "L2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("L2 check passed: ")
    assert target.read_bytes() == original


def test_l2_fails_the_build_when_a_vllm_has_a_fixed_head_size_list(tmp_path):
    target = shadow_package(require(ENGINE), "vllm", TRITON, tmp_path / "shadow")
    text = target.read_text().replace("if head_size < 32:", "if head_size not in [64, 128]:")
    target.write_text(text)
    result = run(ENGINE, tmp_path / "shadow", "-m", "compat_build.image_steps.apply_patches", "L2")
    assert result.returncode == 1 and "decide L2 again" in result.stderr and str(target) in result.stderr


def test_unknown_patch_code_is_a_usage_error(tmp_path):
    result = run(VENVS["4.57"], tmp_path, "-m", "compat_build.image_steps.apply_patches", "L9")
    assert result.returncode == 2 and "unknown patch code" in result.stderr
