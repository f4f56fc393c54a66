"""ModelDir: every bad input is a Problem, never an exception, and nothing is written."""

import json
import os

import pytest

from common.model.modeldir import JSON_MEMORY_CAP, JSON_SIZE_CAP, JSON_SIZE_CAPS, MAX_JSON_DEPTH, ModelDir, memory_cost

from common.tests.helpers import model_dir, preflight_json, tree_digest

LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1842767\n"
)


def test_reads_object_and_caches(tmp_path):
    m = ModelDir(str(model_dir(tmp_path, {"config.json": {"model_type": "llama"}})))
    assert m.json_object("config.json") == {"model_type": "llama"}
    assert m.problems == []


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00garbage\xc3", "not valid"),
        (b"\x80\x81 not utf8", "not valid UTF-8"),
    ],
)
def test_malformed_json_is_a_problem(tmp_path, raw, reason):
    m = ModelDir(str(model_dir(tmp_path, {"config.json": raw})))
    assert m.json_object("config.json") == {}
    assert len(m.problems) == 1 and reason in m.problems[0].reason


def test_non_object_json_is_ignored_with_reason(tmp_path):
    m = ModelDir(str(model_dir(tmp_path, {"config.json": [1, 2]})))
    assert m.json_object("config.json") == {}
    assert "JSON list, not an object" in m.problems[0].reason


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_bom_encoded_json_is_read(tmp_path, encoding):
    m = ModelDir(str(model_dir(tmp_path, {"config.json": json.dumps({"a": "ü"}).encode(encoding)})))
    assert m.json_object("config.json") == {"a": "ü"}


def test_lfs_pointer_is_recognised(tmp_path):
    m = ModelDir(str(model_dir(tmp_path, {"tokenizer.json": LFS_POINTER})))
    state = m.state("tokenizer.json")
    assert state.exists and not state.usable
    assert "Git-LFS pointer" in state.problem.reason
    assert not m.has("tokenizer.json")


def test_dangling_symlink_and_symlink_out_of_model(tmp_path):
    d = model_dir(tmp_path / "m", {"inside.json": {"x": 1}})
    outside = model_dir(tmp_path / "elsewhere", {"secret.json": {"y": 2}})
    os.symlink(d / "missing.json", d / "dangling.json")
    os.symlink(outside / "secret.json", d / "config.json")
    os.symlink(d / "inside.json", d / "alias.json")
    m = ModelDir(str(d))
    assert "dangling symlink" in m.state("dangling.json").problem.reason
    assert m.json_object("config.json") == {}
    assert "leaves the model directory" in m.problems[0].reason
    assert m.json_object("alias.json") == {"x": 1}  # a link inside the model is fine


def test_a_hub_cache_snapshot_reads_its_blobs_and_nothing_else_outside(tmp_path):
    """A model run from a local Hugging Face cache: snapshots/REV/config.json -> ../../blobs/SHA."""
    repo = tmp_path / "hub" / "models--acme--tiny"
    blobs = model_dir(repo / "blobs", {"sha-config": {"model_type": "llama"}})
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    os.symlink(os.path.join("..", "..", "blobs", "sha-config"), snapshot / "config.json")
    outside = model_dir(tmp_path / "elsewhere", {"secret.json": {"y": 2}})
    os.symlink(outside / "secret.json", snapshot / "tokenizer_config.json")
    m = ModelDir(str(snapshot))
    assert m.json_object("config.json") == {"model_type": "llama"}
    assert m.json_object("tokenizer_config.json") == {}
    assert "leaves the model directory" in m.state("tokenizer_config.json").problem.reason
    # The same layout under a name that is not a hub repo is not trusted.
    other = tmp_path / "plain" / "snapshots" / "rev"
    other.mkdir(parents=True)
    os.symlink(blobs / "sha-config", other / "config.json")
    assert "leaves the model directory" in ModelDir(str(other)).state("config.json").problem.reason


def test_oversized_json_is_not_read(tmp_path):
    d = model_dir(tmp_path, {})
    with open(d / "tokenizer_config.json", "wb") as fh:  # sparse: 200 MB without writing them
        fh.truncate(200 * 1024 * 1024)
    m = ModelDir(str(d))
    assert m.json_object("tokenizer_config.json") == {}
    assert f"over the {JSON_SIZE_CAP // (1024 * 1024)} MiB cap" in m.problems[0].reason


def test_unreadable_file(tmp_path, monkeypatch):
    d = model_dir(tmp_path, {"config.json": {"a": 1}})
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).endswith("config.json") else real_access(p, mode))
    m = ModelDir(str(d))
    assert m.json_object("config.json") == {}
    assert "permission denied" in m.problems[0].reason


def test_directory_level_problems(tmp_path):
    assert "does not exist" in ModelDir(str(tmp_path / "nope")).listing_problem().reason
    (tmp_path / "empty").mkdir()
    assert "is empty" in ModelDir(str(tmp_path / "empty")).listing_problem().reason
    (tmp_path / "file").write_text("x")
    assert "not a directory" in ModelDir(str(tmp_path / "file")).listing_problem().reason


def test_reading_never_writes(tmp_path):
    d = model_dir(tmp_path, {"config.json": {"a": 1}, "tokenizer.json": LFS_POINTER, "bad.json": b"{"})
    before = tree_digest(d)
    m = ModelDir(str(d))
    for name in ("config.json", "tokenizer.json", "bad.json", "missing.json"):
        m.read_json(name)
        m.state(name)
    assert tree_digest(d) == before


def test_tokenizer_json_has_room_for_a_large_vocabulary(tmp_path):
    """R2 reads tokenizer.json: a 256k vocabulary is ~35 MB, over the cap of the small files."""
    d = model_dir(tmp_path, {})
    with open(d / "tokenizer.json", "wb") as fh:
        fh.write(b'{"model": {"vocab": {"<|im_start|>": 1}}}')
        fh.write(b" " * (20 * 1024 * 1024))
    m = ModelDir(str(d))
    assert m.json_object("tokenizer.json") == {"model": {"vocab": {"<|im_start|>": 1}}} and m.problems == []
    assert JSON_SIZE_CAPS["tokenizer.json"] > 20 * 1024 * 1024 > JSON_SIZE_CAP // 2


def test_json_that_would_take_too_much_memory_is_not_parsed(tmp_path):
    """Bytes are not memory: 16 MB of `[{},{},...]` are 5 million dicts."""
    blob = b"[" + b"{}," * (5 * 1024 * 1024) + b"{}]"
    assert memory_cost(blob) > JSON_MEMORY_CAP
    m = ModelDir(str(model_dir(tmp_path, {"config.json": blob})))
    assert m.read_json("config.json") == (None, m.problems[0])
    assert "of memory to parse" in m.problems[0].reason


@pytest.mark.parametrize(
    "depth, reason",
    [
        (MAX_JSON_DEPTH + 1, f"deeper than {MAX_JSON_DEPTH} levels"),
        (900, f"deeper than {MAX_JSON_DEPTH} levels"),
        (100000, "deeper than Python can parse"),
    ],
)
def test_deep_json_is_a_problem_not_a_recursion_error(tmp_path, depth, reason):
    m = ModelDir(str(model_dir(tmp_path, {"config.json": b'{"a": ' + b"[" * depth + b"]" * depth + b"}"})))
    assert m.json_object("config.json") == {}
    assert reason in m.problems[0].reason


def test_json_as_deep_as_the_cap_is_read(tmp_path):
    depth = MAX_JSON_DEPTH - 1
    m = ModelDir(str(model_dir(tmp_path, {"config.json": b'{"a": ' + b"[" * depth + b"]" * depth + b"}"})))
    assert "a" in m.json_object("config.json") and m.problems == []


def test_lone_surrogates_are_carried_as_escapes_and_reported(tmp_path):
    raw = b'{"architectures": ["Llama\\ud800ForCausalLM"], "\\udfff": ["\\ud83d\\ude00 ok", "x\\uDBFFy"]}'
    m = ModelDir(str(model_dir(tmp_path, {"config.json": raw})))
    config, problem = m.read_json("config.json")
    assert config == {"architectures": ["Llama\\ud800ForCausalLM"], "\\udfff": ["\U0001f600 ok", "x\\udbffy"]}
    assert "3 string(s) with lone UTF-16 surrogates" in problem.reason
    json.dumps(config, ensure_ascii=False).encode("utf-8")  # every output can carry it now
    assert m.json_object("config.json") == config  # usable, with the caveat reported once
    assert m.problems == [problem]


def test_valid_surrogate_pairs_are_no_problem(tmp_path):
    m = ModelDir(str(model_dir(tmp_path, {"tokenizer_config.json": b'{"eos_token": "\\ud83d\\ude00"}'})))
    assert m.json_object("tokenizer_config.json") == {"eos_token": "\U0001f600"} and m.problems == []


def test_a_hub_cache_snapshot_gets_the_plan_of_the_same_files_in_a_plain_directory(models, env_for_tests, tmp_path):
    source = models("v5-generic")
    repo = tmp_path / "hub" / "models--acme--tiny-v5"
    snapshot = repo / "snapshots" / "0123abc"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, path in enumerate(sorted(source.iterdir())):
        (repo / "blobs" / f"sha{i}").write_bytes(path.read_bytes())
        os.symlink(os.path.join("..", "..", "blobs", f"sha{i}"), snapshot / path.name)
    plain, cached = preflight_json(source, env=env_for_tests), preflight_json(snapshot, env=env_for_tests)
    assert [r["code"] for r in cached["repairs"]] == [r["code"] for r in plain["repairs"]] == ["R3", "R3b", "R5"]
    assert all(r["verified"] for r in cached["repairs"]) and not [f for f in cached["findings"] if f["code"] == "INPUT"]
