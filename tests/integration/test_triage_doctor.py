"""triage on real failure output (transformers, Python, torch, huggingface_hub and vLLM's own
code raising on this machine), bad input, and doctor on the fixtures.

The real vLLM serve logs (vanilla failures and healthy starts) are triaged in test_e2e_vllm.py,
where they are produced."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.tests.helpers import fake_engine
from tests.integration.test_library_patches import ENGINE, VENVS, require

ROOT = Path(__file__).resolve().parents[2]


def common(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "common", *args],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
        timeout=300,
    )


def triage_json(*paths, card=None):
    args = ["triage", *map(str, paths), "--json"] + (["--card", card] if card else [])
    result = common(*args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def capture(python, code, path: Path, env=None, cwd=None) -> Path:
    """Run `code` under a real interpreter and keep everything it printed, as a pod log would."""
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run_env.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=run_env, timeout=300, cwd=cwd)
    assert proc.returncode != 0, "the captured run was expected to fail"
    path.write_text(proc.stdout + proc.stderr)
    return path


LOAD_TOKENIZER = (
    "import sys\nfrom transformers import AutoTokenizer\nAutoTokenizer.from_pretrained(sys.argv[1] if len(sys.argv) > 1 else {!r})"
)


@pytest.fixture(scope="module")
def corpus(models, tmp_path_factory):
    """Real failure output, each file named by the class it must get."""
    base = tmp_path_factory.mktemp("logs")
    out = {}
    for venv in (VENVS["4.55"], ENGINE):
        require(venv)
    for version in ("4.55", "4.57"):
        python = VENVS[version] / "bin" / "python"
        out[f"R3b-{version}"] = capture(python, LOAD_TOKENIZER.format(str(models("v5-generic"))), base / f"tf{version}-generic.log")
        out[f"R3-{version}"] = capture(python, LOAD_TOKENIZER.format(str(models("v5-qwen2"))), base / f"tf{version}-qwen2.log")
    out["H1"] = capture(
        ENGINE / "bin" / "python",
        "from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend as T\nT.validate_head_size(16)",
        base / "vllm-headsize.log",
    )
    vendor = base / "site" / "ixformer"
    (vendor / "contrib" / "vllm").mkdir(parents=True)
    (vendor / "functions").mkdir()
    for pkg in (vendor, vendor / "contrib", vendor / "contrib" / "vllm", vendor / "functions"):
        (pkg / "__init__.py").write_text("")
    site = {"PYTHONPATH": str(base / "site")}
    out["R7"] = capture(
        sys.executable, "from ixformer.contrib.vllm.layers import mixtral_decoder_layer_forward", base / "ixformer-layers.log", env=site
    )
    out["L3"] = capture(
        sys.executable, "import ixformer.functions as F\nF.gelu_tanh_and_mul(None, None)", base / "ixformer-ops.log", env=site
    )
    out["OOM"] = capture(sys.executable, "import torch\ntorch.empty(1 << 50, dtype=torch.uint8)", base / "alloc.log")
    out["DEVICE"] = capture(sys.executable, "import torch\ntorch.zeros(1, device='cuda')", base / "device.log")
    remote = base / "remote-model"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps({"model_type": "acme", "auto_map": {"AutoConfig": "conf.AcmeConfig"}}))
    out["REMOTE_CODE"] = capture(
        sys.executable, f"from transformers import AutoConfig\nAutoConfig.from_pretrained({str(remote)!r})", base / "remote.log"
    )
    out["NETWORK"] = capture(
        sys.executable,
        "from transformers import AutoConfig\nAutoConfig.from_pretrained('acme/tiny')",
        base / "network.log",
        env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"},
    )
    out["GGUF"] = capture(
        sys.executable,
        f"from transformers import AutoConfig\nAutoConfig.from_pretrained({str(remote)!r}, gguf_file='model-q4_k_m.gguf')",
        base / "gguf.log",
    )
    healthy = base / "healthy.log"
    ok = subprocess.run(
        [sys.executable, "-c", LOAD_TOKENIZER.format(str(models("457-generic"))) + "\nprint('loaded')"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert ok.returncode == 0
    healthy.write_text(ok.stdout + ok.stderr)
    out["unknown"] = healthy
    # A healthy load that mentions GGUF: 4.57's LlamaTokenizerFast legacy warning (a Llama whose
    # tokenizer.json ships without tokenizer_config.json) is not a GGUF checkpoint.
    llama_fast = base / "tokenizer-json-only"
    shutil.copytree(models("457-generic"), llama_fast)
    (llama_fast / "tokenizer_config.json").unlink()
    ok = subprocess.run(
        [sys.executable, "-c", LOAD_TOKENIZER.format(str(llama_fast)) + "\nprint('loaded')"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert ok.returncode == 0 and "GGUF file" in ok.stderr, ok.stderr
    (base / "healthy-llama-fast.log").write_text(ok.stdout + ok.stderr)
    out["unknown-llama-fast"] = base / "healthy-llama-fast.log"
    return out


def test_each_real_failure_gets_its_class_with_evidence_and_fix(corpus):
    report = triage_json(*corpus.values())
    got = {Path(f["path"]).name: f for f in report["files"]}
    for label, path in corpus.items():
        verdict = got[path.name]
        assert verdict["code"] == label.split("-")[0], (label, verdict)
        if not label.startswith("unknown"):
            assert verdict["evidence"] and verdict["fix"], verdict
    assert got["tf4.57-generic.log"]["evidence"].startswith("ValueError: Tokenizer class TokenizersBackend does not exist")
    assert got["tf4.55-qwen2.log"]["evidence"] == "AttributeError: 'list' object has no attribute 'keys'"
    assert "Head size 16 is not supported by TritonAttention" in got["vllm-headsize.log"]["evidence"]
    assert got["healthy.log"]["evidence"] == "" and got["healthy.log"]["fix"] == ""
    assert report["summary"]["files"] == len(corpus)
    assert report["summary"]["by_code"]["R3b"] == 2


def test_gz_json_report_folder_and_card_from_path(corpus, tmp_path):
    logs = tmp_path / "bi100" / "job-17"
    logs.mkdir(parents=True)
    text = corpus["R3b-4.57"].read_bytes()
    with gzip.open(logs / "pod_runtime_log.txt.gz", "wb") as fh:
        fh.write(text)
    (logs / "error_report_raw.json").write_text(
        json.dumps({"status": "failed", "detail": {"log": corpus["R7"].read_text(), "exit_code": 1}})
    )
    report = triage_json(tmp_path)
    got = {Path(f["path"]).name: f for f in report["files"]}
    assert got["pod_runtime_log.txt.gz"]["code"] == "R3b" and got["error_report_raw.json"]["code"] == "R7"
    assert {f["card"] for f in report["files"]} == {"iluvatar-bi100"}
    assert report["summary"]["by_card"] == {"iluvatar-bi100": {"R3b": 1, "R7": 1}}
    forced = triage_json(logs, card="hygon-k100")
    assert {f["card"] for f in forced["files"]} == {"hygon-k100"}


def test_bad_input_is_reported_per_file_never_fatal(corpus, tmp_path):
    (tmp_path / "binary.log").write_bytes(b"\xff\xfe\x00garbage\x80\n" + corpus["R3-4.57"].read_bytes() + b"\xc3\x28\n")
    (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b\x08\x00not really gzip")
    (tmp_path / "bad.json").write_text("{not json, but: AttributeError: 'list' object has no attribute 'keys'")
    (tmp_path / "empty.log").write_text("")
    (tmp_path / "link.log").symlink_to(tmp_path / "nowhere")
    report = triage_json(tmp_path, tmp_path / "missing.log")
    got = {Path(f["path"]).name: f for f in report["files"]}
    assert got["binary.log"]["code"] == "R3"
    assert got["bad.json"]["code"] == "R3"  # not JSON: scanned as text
    assert got["broken.gz"]["code"] == "unknown" and "cannot be read" in got["broken.gz"]["problem"]
    assert got["empty.log"]["code"] == "unknown"
    assert got["missing.log"]["problem"] == "no such file or directory"
    assert "link.log" not in got  # a dangling link is no file


def test_unreadable_directory_is_logged(tmp_path, monkeypatch, capsys):
    """A directory that cannot be listed (chmod 000 for a non-root user) is a log line, not a crash."""
    import io

    from common import triage
    from common.start import log

    logged = io.StringIO()
    monkeypatch.setattr(log, "_stream", logged)
    real_scandir = os.scandir

    def scandir(path):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    (tmp_path / "locked").mkdir()
    (tmp_path / "ok.log").write_text("CUDA error: an illegal memory access was encountered\n")
    monkeypatch.setattr(os, "scandir", scandir)
    assert triage.run([str(tmp_path)], None, as_json=True) == 0
    out = capsys.readouterr()
    assert "locked: cannot be listed (Permission denied)" in logged.getvalue()
    assert [f["code"] for f in json.loads(out.out)["files"]] == ["DEVICE"]


def test_markdown_table_by_default(corpus):
    result = common("triage", str(corpus["R7"]), str(corpus["OOM"]))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "| file | card | code | evidence | fix |"
    assert any("| R7 |" in line and "No module named 'ixformer.contrib.vllm.layers'" in line for line in lines)
    assert "| code | files |" in lines and "| OOM | 1 |" in lines


def test_evidence_is_the_last_matching_line_across_blocks(tmp_path, monkeypatch):
    """A signature split over the block boundary is still found, and the latest occurrence wins."""
    from common import triage

    monkeypatch.setattr(triage, "BLOCK", 64)
    log = tmp_path / "long.log"
    log.write_text(
        "INFO starting\n" * 50
        + "ValueError: Tokenizer class FooTok does not exist or is not currently imported.\n"
        + "INFO more\n" * 50
        + "ValueError: Tokenizer class BarTok does not exist or is not currently imported.\n"
    )
    verdict = triage.triage_file(str(log))
    assert verdict.code == "R3b" and "BarTok" in verdict.evidence


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    last_newline=st.booleans(),
    cuts=st.lists(st.floats(min_value=0, max_value=1), max_size=5),
    block=st.integers(min_value=1, max_value=64),
)
def test_the_ranges_of_a_file_hold_each_of_its_lines_once(tmp_path_factory, lines, last_newline, cuts, block):
    """Wherever the ranges of a large log are cut (in a line, on its newline, in an empty line, past
    the end), their blocks, in order, are the file: no line lost, none searched twice, every block
    whole lines."""
    from common import triage

    content = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    path = tmp_path_factory.mktemp("ranges") / "log"
    path.write_bytes(content)
    bounds = [0] + sorted(int(c * len(content)) for c in cuts) + [len(content)]
    old, triage.BLOCK = triage.BLOCK, block
    try:
        with open(path, "rb") as fh:
            blocks = [b for start, end in zip(bounds[:-1], bounds[1:], strict=True) for b in triage._range_blocks(fh, start, end)]
    finally:
        triage.BLOCK = old
    assert b"".join(blocks) == content
    assert all(b.endswith(b"\n") for b in blocks[:-1])


def test_a_log_searched_in_ranges_gets_the_verdict_and_evidence_of_one_process(tmp_path, monkeypatch):
    """The ranges are searched by processes of their own: the earliest class still wins, and its
    evidence is the last matching line of the whole file, whichever range holds it."""
    import io

    from common import triage
    from common.start import log as start_log

    logged = io.StringIO()
    monkeypatch.setattr(start_log, "_stream", logged)
    log = tmp_path / "large.log"
    log.write_text(
        "".join(
            f"INFO step {i}\n"
            + ("OutOfMemoryError: CUDA out of memory\n" if i in (3, 250) else "")
            + (f"ValueError: Tokenizer class Tok{i} does not exist or is not currently imported.\n" if i in (5, 120, 390) else "")
            for i in range(400)
        )
    )
    alone = triage.scan(triage._blocks(str(log)), triage.signatures())
    assert alone is not None and alone[0].code == "R3b" and "Tok390" in alone[1]
    monkeypatch.setattr(triage, "BLOCK", 97)
    for parts in (2, 3, 7):
        verdict = triage.triage_file(str(log), ranges=parts)
        assert (verdict.code, verdict.evidence) == (alone[0].code, alone[1]), parts
    assert "searched in one process" not in logged.getvalue()

    def no_fork():
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)  # no process to be had: searched here, and said so
    verdict = triage.triage_file(str(log), ranges=3)
    assert (verdict.code, verdict.evidence) == (alone[0].code, alone[1])
    assert "searched in one process ([Errno 11] Resource temporarily unavailable)" in logged.getvalue()


def test_every_signature_has_a_literal_anchor():
    from common.triage import literal_anchor, signatures

    assert len(signatures()) > 20
    assert literal_anchor(r"Head size \d+ is not supported by \w+") == " is not supported by "
    assert literal_anchor(r"GGUF (?:file|model)") == "GGUF "
    with pytest.raises(ValueError):
        literal_anchor(r"abc|def")


def test_the_signatures_share_their_passes_over_a_log():
    from common.triage import MAX_PASSES, SHARED_KEYS, signatures

    sigs = signatures()
    # A line that matches holds the anchor, and the anchor its key: searching the key finds it.
    assert all(sig.key in sig.anchor for sig in sigs)
    # A shared key that serves one signature is a shorter, so dearer, pass than that anchor alone.
    lone = [key for key in SHARED_KEYS if sum(sig.key == key for sig in sigs) < 2]
    assert lone == []
    assert len({sig.key for sig in sigs}) <= MAX_PASSES, "a new pass over every log: share a key, or raise MAX_PASSES knowingly"


# ---- doctor ---------------------------------------------------------------------------------


# The card's default engine judged with the dev venv's transformers; nv-a100@next left without an
# engine Python (doctor would find this checkout's .venv-engine-next by itself and recommend it).
# The dev venv has no vLLM to build the model class with: its engine Python here answers the model
# build as built (common/tests/helpers.fake_engine: every other check runs for real), so that these
# tests read the table of a model that starts. MB itself is tests/e2e/test_model_build_vs_engine.py's.
DOCTOR_ENV = {"COMPAT_ENGINE_PYTHON_NEXT": "/nonexistent/engine-next/python", "COMPAT_SKIP": ""}


@pytest.fixture(scope="module")
def building_engine(tmp_path_factory) -> str:
    return str(fake_engine(tmp_path_factory.mktemp("engine"))[0])


def doctor(model, card, *extra, env=None, engine=sys.executable):
    return common("doctor", str(model), "--card", card, *extra, env={**DOCTOR_ENV, "COMPAT_ENGINE_PYTHON": engine, **(env or {})})


def test_doctor_table_for_a_repairable_model(models, building_engine):
    result = doctor(models("v5-generic"), "nv-a100", engine=building_engine)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "| code | on this card's stack | what the image does | result |" in out
    for code in ("R3", "R3b", "R5"):
        assert f"| {code} |" in out
    assert out.count("| repaired |") == 3
    assert "verdict: the nv-a100 image will start this model (adding: --tokenizer" in out


def test_doctor_clean_model(models, building_engine):
    result = doctor(models("457-generic"), "nv-a100", engine=building_engine)
    assert result.returncode == 0 and "nothing on this card's stack would fail" in result.stdout


def test_doctor_model_that_fails_even_repaired(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen9ForCausalLM"], "model_type": "qwen9"}))
    result = doctor(model, "nv-a100")
    assert result.returncode == 1
    assert "| R4 |" in result.stdout and "| FAILS |" in result.stdout
    assert "verdict: this model will fail on nv-a100 even with the image's repairs (CONFIG, R4)" in result.stdout
    data = json.loads(doctor(model, "nv-a100", "--json").stdout)
    assert data["verdict"] == "fails" and data["failing"] == ["CONFIG", "R4"]
    assert {"card", "model_dir", "facts", "repairs", "findings", "args", "env"} <= set(data)


def test_doctor_json_carries_verification(models, building_engine):
    result = doctor(models("v5-qwen2"), "hygon-k100", "--json", engine=building_engine)
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["verdict"] == "starts"
    [r3] = [r for r in data["repairs"] if r["code"] == "R3"]
    assert r3["verified"] is True and r3["verification"]


def test_doctor_cannot_tell_without_the_engines_transformers(models):
    result = doctor(models("v5-generic"), "nv-a100", env={"COMPAT_ENGINE_PYTHON": "/nonexistent/python3"})
    assert result.returncode == 2
    assert "verdict: unknown: CONFIG, MB, R3, R3b could not be verified here; set COMPAT_ENGINE_PYTHON" in result.stdout
    data = json.loads(doctor(models("v5-generic"), "nv-a100", "--json", env={"COMPAT_ENGINE_PYTHON": "/nonexistent/python3"}).stdout)
    assert data["verdict"] == "unverified" and data["unverified"] == ["CONFIG", "MB", "R3", "R3b"]


@pytest.mark.parametrize("args", [["/no/such/model", "--card", "nv-a100"], [".", "--card", "mystery"], []])
def test_doctor_usage_errors_exit_2(args):
    result = common("doctor", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
