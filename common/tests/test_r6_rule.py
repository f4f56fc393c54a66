"""R6: a processor saved in transformers 5 form (one nested processor_config.json) reaches an
engine whose transformers does not read that form (the profile's fact: BI-100's 4.55) through a
model view with the legacy files. A transformers-5 tokenizer beside a processor in either form
reaches the processor through the view too (the routing: vLLM loads the processor, and the
processor its tokenizer, from the model path). Bad processor files are findings, never a crash.
Verification loads the processor with the engines' own transformers (.venv-engine's 4.57,
.venv-engine055's 4.55: the dev venv has no PIL, which the image processor needs)."""

import json
import os
from pathlib import Path

import pytest

from common.model.modeldir import ModelDir
from common.model.processor_files import has_processor, processor_check
from common.engine.profile import Profile, load_profile
from common.rules.support.base import Context
from common.rules.r6_processor_files import LEGACY_FILES, RULE, legacy_class, legacy_files
from common.triage import triage_file

from common.tests.helpers import ROOT, metadata_layer_passed, model_dir, preflight_json, run_common, tree_digest

ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
ENGINE055_PYTHON = ROOT / ".venv-engine055" / "bin" / "python"  # iluvatar-bi100's transformers 4.55

IMAGE_PROCESSOR = {
    "crop_size": {"height": 32, "width": 32},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "CLIPImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 32},
}
# What transformers 5.24 writes for build_vlm.py's LLaVA (the metadata files; no weights).
PROCESSOR_V5 = {
    "image_processor": IMAGE_PROCESSOR,
    "image_token": "<image>",
    "num_additional_image_tokens": 1,
    "patch_size": 8,
    "processor_class": "LlavaProcessor",
    "vision_feature_select_strategy": "default",
}
TOKENIZER_CONFIG_V5 = {
    "backend": "tokenizers",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "extra_special_tokens": ["<image>"],
    "processor_class": "LlavaProcessor",
    "tokenizer_class": "TokenizersBackend",
}
CONFIG = {
    "architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava",
    "image_token_index": 5,
    "text_config": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_attention_heads": 4},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
}


def tokenizer_json():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<image>": 3, "a": 4, "b": 5, "ab": 6}
    added = [{"id": i, "content": t, "special": True, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
             for t, i in list(vocab.items())[:4]]  # fmt: skip
    return {
        "version": "1.0",
        "added_tokens": added,
        "pre_tokenizer": {"type": "Whitespace"},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["a b"], "unk_token": "<unk>"},
    }


def llava(tmp_path, **replace):
    files = {
        "config.json": CONFIG,
        "processor_config.json": PROCESSOR_V5,
        "tokenizer_config.json": TOKENIZER_CONFIG_V5,
        "tokenizer.json": tokenizer_json(),
        "model.safetensors": b"\0" * 64,
    }
    files.update(replace)
    return model_dir(tmp_path / "llava", {k: v for k, v in files.items() if v is not None})


# The same processor in transformers 4.x form: the image processor in preprocessor_config.json,
# the processor's own arguments in processor_config.json.
PROCESSOR_4X = {k: v for k, v in PROCESSOR_V5.items() if k != "image_processor"}
PREPROCESSOR_4X = dict(IMAGE_PROCESSOR, processor_class="LlavaProcessor")


def llava_4x(tmp_path, **replace):
    return llava(tmp_path, **{"processor_config.json": PROCESSOR_4X, "preprocessor_config.json": PREPROCESSOR_4X, **replace})


@pytest.fixture
def env(env_for_tests):
    env_for_tests["COMPAT_SKIP"] = "R2,R5,H1,H2,R7,R8"
    return env_for_tests


def repairs(plan, code):
    return [r for r in plan["repairs"] if r["code"] == code]


def findings(plan, code):
    return [f for f in plan["findings"] if f["code"] == code]


def crashed(plan):
    """A rule that raised is reported as "rule failed" and skipped: never the case here."""
    return [f for f in plan["findings"] if "rule failed" in f["message"]]


def test_legacy_files_from_the_nested_keys():
    problems = []
    files = legacy_files(dict(PROCESSOR_V5, video_processor={"video_processor_type": "X"}), [], problems)
    assert files == {"preprocessor_config.json": IMAGE_PROCESSOR, "video_preprocessor_config.json": {"video_processor_type": "X"}}
    assert problems == []
    assert legacy_files(PROCESSOR_V5, ["preprocessor_config.json"], problems) == {}  # the model has it: left alone
    assert set(LEGACY_FILES) == {"image_processor", "feature_extractor", "video_processor"}


@pytest.mark.parametrize(
    "name, legacy",
    [("CLIPImageProcessorPil", "CLIPImageProcessor"), ("CLIPImageProcessor", "CLIPImageProcessor"), ("Pil", "Pil")],
)
def test_backend_class_names_map_to_the_old_name(name, legacy):
    assert legacy_class(name) == legacy
    files = legacy_files({"image_processor": dict(IMAGE_PROCESSOR, image_processor_type=name)}, [], [])
    assert files["preprocessor_config.json"]["image_processor_type"] == legacy


def test_view_holds_legacy_processor_and_repaired_tokenizer_files(tmp_path, env):
    """BI-100's transformers 4.55 does not read the nested form (its profile's fact)."""
    model = llava(tmp_path)
    before = tree_digest(model)
    plan = preflight_json(model, "iluvatar-bi100", env=dict(env, COMPAT_ENGINE_PYTHON="/nonexistent/python"))
    [r6] = repairs(plan, "R6")
    assert "loads the processor from the model path" in r6["detail"] and "does not read the nested" in r6["detail"]
    assert r6["view_files"] == ["preprocessor_config.json", "processor_config.json"]
    # No engine Python: nothing verified, nothing served in place of the model.
    assert r6["verified"] is None and plan["view"] is None and plan["model_path"] == str(model)
    view = Path(plan["work_dir"]) / "model"
    assert json.loads((view / "preprocessor_config.json").read_text()) == IMAGE_PROCESSOR
    tokenizer_config = json.loads((view / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast" and "extra_special_tokens" not in tokenizer_config
    # 4.x form: the processor's own arguments only (4.55 fails on a nested image_processor dict).
    assert json.loads((view / "processor_config.json").read_text()) == {k: v for k, v in PROCESSOR_V5.items() if k != "image_processor"}
    assert os.path.islink(view / "model.safetensors") and os.path.islink(view / "tokenizer.json")
    assert tree_digest(model) == before  # red line 1


@pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="no .venv-engine: run `make engine-env`")
@pytest.mark.parametrize("form", ["nested", "4.x"])
def test_the_tokenizer_overlay_reaches_the_processor_through_a_view(tmp_path, env, form):
    """nv-a100's transformers 4.57 reads either processor form (no legacy file is written: no R6),
    but the processor loads the model path's transformers-5 tokenizer: the overlay's files ride a
    view, verified by the engine's transformers loading the processor from it."""
    model = llava(tmp_path) if form == "nested" else llava_4x(tmp_path)
    plan = preflight_json(model, env=dict(env, COMPAT_ENGINE_PYTHON=str(ENGINE_PYTHON)))
    assert repairs(plan, "R6") == [] and findings(plan, "R6") == []
    riders = repairs(plan, "R3") + repairs(plan, "R3b")
    assert len(riders) == 2 and all(r["verified"] is True for r in riders), riders
    assert (
        "probe ids match tokenizer.json; the view: the processor loads as LlavaProcessor (image_processor CLIPImageProcessor)"
        in (riders[0]["verification"])
    )
    assert plan["model_path"] == plan["view"]["path"] and plan["view"]["codes"] == ["R3", "R3b"]
    assert plan["view"]["rewritten"] == ["tokenizer_config.json"] and "its tokenizer" in plan["view"]["why"]
    assert plan["args"][plan["args"].index("--served-model-name") + 1] == str(model)
    assert "--tokenizer" in plan["args"]  # the engine's own tokenizer keeps the overlay
    view = Path(plan["view"]["path"])
    assert os.path.islink(view / "processor_config.json") and (view / "preprocessor_config.json").is_symlink() is (form == "4.x")


@pytest.mark.skipif(not ENGINE055_PYTHON.exists(), reason="no .venv-engine055: run `make engine055-env`")
def test_bi100s_transformers_4_55_fails_on_the_model_and_loads_the_view(tmp_path, env):
    """transformers 4.55 has no fallback to the nested file: the model itself fails there
    (asked of the engine's own transformers), the view loads."""
    from common.start.verify import run_checks

    model = llava(tmp_path)
    plan = preflight_json(model, "iluvatar-bi100", env=dict(env, COMPAT_ENGINE_PYTHON=str(ENGINE055_PYTHON)))
    [r6] = repairs(plan, "R6")
    assert r6["verified"] is True, r6
    tokenizer_ok = model_dir(tmp_path / "tokenizer-ok", {})
    for name in ("config.json", "tokenizer.json", "processor_config.json"):
        os.symlink(model / name, tokenizer_ok / name)
    model_dir(tokenizer_ok, {"tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast"}})
    [verdict] = run_checks([{"kind": "processor", "path": str(tokenizer_ok)}], dict(env, COMPAT_ENGINE_PYTHON=str(ENGINE055_PYTHON)))
    assert verdict.ok is False and "does not appear to have a file named preprocessor_config.json" in verdict.reason


@pytest.mark.skipif(not ENGINE055_PYTHON.exists(), reason="no .venv-engine055: run `make engine055-env`")
def test_doctor_on_bi100_passes_r6_and_the_nested_r5_verified_by_4_55(tmp_path, env):
    """doctor with the BI-100 engine's Python: the legacy processor files and the text_config's
    rope_theta (which 4.55 would lose) both reach the engine through one verified view."""
    text_config = dict(CONFIG["text_config"], rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    model = llava(tmp_path, **{"config.json": dict(CONFIG, text_config=text_config)})
    doctor_env = dict(
        env, COMPAT_ENGINE_PYTHON=str(ENGINE055_PYTHON), COMPAT_SKIP="R2,R9,MB"
    )  # R5 on here; MB: vLLM 0.5.5's CPU build cannot import its SigLIP
    result = run_common(["doctor", str(model), "--card", "iluvatar-bi100", "--json"], doctor_env)
    data = json.loads(result.stdout)
    assert result.returncode == 2 and metadata_layer_passed(data), data  # MB skipped: unverified, never "starts"
    verified = {r["code"]: r["verified"] for r in data["repairs"]}
    assert verified["R6"] is True and verified["R5"] is True, data["repairs"]
    [r5] = repairs(data, "R5")
    assert r5["config_edits"]["text_config"]["rope_theta"] == 1000000.0


@pytest.mark.skipif(not ENGINE055_PYTHON.exists(), reason="no .venv-engine055: run `make engine055-env`")
def test_a_processor_the_engine_cannot_load_drops_the_view(tmp_path, env):
    """The check compares what loads with the nested file: a class the engine lacks fails it, and
    the tokenizer repairs that ride the view go with it."""
    model = llava(tmp_path, **{"processor_config.json": dict(PROCESSOR_V5, processor_class="AcmeVisionProcessor")})
    plan = preflight_json(model, "iluvatar-bi100", env=dict(env, COMPAT_ENGINE_PYTHON=str(ENGINE055_PYTHON)))
    [r6] = repairs(plan, "R6")
    assert r6["verified"] is False and plan["view"] is None and plan["model_path"] == str(model)
    assert [r["verified"] for r in repairs(plan, "R3") + repairs(plan, "R3b")] == [False, False]
    assert any("R6+R3+R3b dropped" in f["message"] and f["severity"] == "error" for f in findings(plan, "R6"))


@pytest.mark.parametrize("card, reads", [("nv-a100", True), ("hygon-k100", True), ("iluvatar-bi100", False), ("nv-a100@next", True)])
def test_each_profile_says_whether_its_transformers_reads_the_nested_form(card, reads):
    """Probed on each engine by compat_build/snapshot_engine.py: 4.57 and 5.x fall back to the
    nested processor_config.json, 4.55 fails for want of preprocessor_config.json."""
    assert load_profile(card).reads_nested_processor_config is reads


def check_without_the_fact(model, fact):
    data = json.loads((ROOT / "common" / "engine" / "profiles" / "nv-a100.json").read_text())
    data["engine"]["reads"].pop("nested_processor_config")
    if fact is not None:
        data["engine"]["reads"]["nested_processor_config"] = fact
    ctx = Context(model=ModelDir(str(model)), profile=Profile(data), facts={}, user=None, env={})
    return RULE.check(ctx)


@pytest.mark.parametrize("fact", [None, True, False])
def test_the_rule_decides_from_the_fact_and_says_when_the_profile_lacks_it(tmp_path, fact):
    """A profile made before the fact was recorded: said ("unverified"), not guessed; a readable
    tokenizer leaves the rest to the fact alone."""
    outcome = check_without_the_fact(llava(tmp_path), fact)
    if fact is None:
        assert outcome.repairs == [] and [f.severity for f in outcome.findings] == ["unverified"]
        assert "4.56 and earlier do not" in outcome.findings[0].message
    elif fact:
        assert outcome.repairs == [] and outcome.findings == []
    else:
        [repair] = outcome.repairs
        assert sorted(repair.view_files) == ["preprocessor_config.json", "processor_config.json"]
        assert repair.processor_check == {"processor_class": "LlavaProcessor", "components": {"image_processor": IMAGE_PROCESSOR}}


def test_processor_check_reads_the_files_as_the_engine_does(tmp_path):
    """A legacy file wins over the nested entry (4.57 reads preprocessor_config.json first); the
    class comes from the processor files, else the tokenizer's config; no files: no processor."""
    nested = processor_check(ModelDir(str(llava(tmp_path / "a"))))
    assert nested == {"processor_class": "LlavaProcessor", "components": {"image_processor": IMAGE_PROCESSOR}}
    legacy = processor_check(ModelDir(str(llava_4x(tmp_path / "b"))))
    assert legacy == {"processor_class": "LlavaProcessor", "components": {"image_processor": PREPROCESSOR_4X}}
    audio = llava_4x(tmp_path / "c", **{"preprocessor_config.json": {"feature_extractor_type": "WhisperFeatureExtractor"}})
    assert list(processor_check(ModelDir(str(audio)))["components"]) == ["feature_extractor"]
    text = llava(tmp_path / "d", **{"processor_config.json": None})
    assert not has_processor(ModelDir(str(text))) and processor_check(ModelDir(str(text))) is None


def test_a_text_model_keeps_its_tokenizer_overlay_alone(tmp_path, env):
    """No processor files: the tokenizer overlay goes by --tokenizer only, no view."""
    model = llava(tmp_path, **{"processor_config.json": None})
    plan = preflight_json(model, env=dict(env, COMPAT_ENGINE_PYTHON="/nonexistent/python"))
    assert repairs(plan, "R3b") and plan["view"] is None and not (Path(plan["work_dir"]) / "model").exists()


def test_processor_files_in_4x_form_get_nothing(tmp_path, env):
    tokenizer_config = dict(TOKENIZER_CONFIG_V5, tokenizer_class="PreTrainedTokenizerFast", extra_special_tokens=None)
    model = llava_4x(tmp_path)
    model_dir(model, {"tokenizer_config.json": {k: v for k, v in tokenizer_config.items() if v is not None}})
    plan = preflight_json(model, env=env)
    assert repairs(plan, "R6") == [] and findings(plan, "R6") == [] and plan["args"] == []


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "is not valid JSON"),
        ([1, 2], "holds a JSON list, not an object"),
        ('"text"', "holds a JSON str, not an object"),
        ({"processor_class": "LlavaProcessor"}, None),  # no nested keys: 4.x form
    ],
)
def test_malformed_processor_config_is_an_input_finding(tmp_path, env, content, says):
    model = llava(tmp_path, **{"processor_config.json": content})
    plan = preflight_json(model, env=env)
    assert repairs(plan, "R6") == [] and not crashed(plan)
    messages = " ".join(f["message"] for f in plan["findings"] if f["code"] == "INPUT")
    assert (says in messages) if says else "processor_config.json" not in messages


def test_a_nested_value_that_is_not_an_object_is_a_warning(tmp_path, env):
    model = llava(tmp_path, **{"processor_config.json": dict(PROCESSOR_V5, image_processor=["x"])})
    plan = preflight_json(model, "iluvatar-bi100", env=dict(env, COMPAT_ENGINE_PYTHON="/nonexistent/python"))
    assert "image_processor is a JSON list, not an object" in findings(plan, "R6")[0]["message"]
    assert repairs(plan, "R6") == [] and not crashed(plan)  # no legacy file to write
    view = Path(plan["work_dir"]) / "model"  # the tokenizer still needs the view (unverified here: not served)
    assert (view / "tokenizer_config.json").is_file() and not (view / "preprocessor_config.json").exists()


def test_a_symlink_out_of_the_model_is_not_followed(tmp_path, env):
    outside = model_dir(tmp_path / "outside", {"processor_config.json": PROCESSOR_V5})
    model = llava(tmp_path, **{"processor_config.json": None})
    os.symlink(outside / "processor_config.json", model / "processor_config.json")
    plan = preflight_json(model, env=env)
    assert repairs(plan, "R6") == [] and not crashed(plan)
    assert any("leaves the model directory" in f["message"] for f in plan["findings"] if f["code"] == "INPUT")


def test_a_huge_processor_config_is_not_read(tmp_path, env):
    model = llava(tmp_path, **{"processor_config.json": None})
    with open(model / "processor_config.json", "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: no disk used
    plan = preflight_json(model, env=env)
    assert repairs(plan, "R6") == [] and not crashed(plan)
    assert any("cap for metadata" in f["message"] for f in plan["findings"] if f["code"] == "INPUT")


def test_triage_names_r6_for_the_processor_failure_of_vllm_0_11(tmp_path):
    """What vLLM 0.11.0 logs when its processor meets the model path's transformers-5 tokenizer
    (seen in tests/e2e/vllm011/test_e2e_vlm_vllm.py): R3b's line is there too, and R6 is the fix."""
    log = tmp_path / "vllm.log"
    log.write_text(
        "ERROR [core.py:708] ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported.\n"
        "ERROR [core.py:708] RuntimeError: Failed to load the processor. If the processor is a custom processor not yet "
        "available in the HuggingFace transformers library, consider setting `trust_remote_code=True` in LLM or using "
        "the `--trust-remote-code` flag in the CLI.\n"
    )
    assert triage_file(str(log)).code == "R6"
    log.write_text("OSError: /model does not appear to have a file named preprocessor_config.json. Checkout 'https://...'\n")
    assert triage_file(str(log)).code == "R6"


def test_a_transformers5_engine_reads_the_processor_where_it_is(tmp_path, env):
    """nv-a100@next (transformers 5.19) reads every transformers-5 form: nothing to repair or say."""
    plan = preflight_json(llava(tmp_path), "nv-a100@next", env=dict(env, COMPAT_ENGINE_PYTHON="/nonexistent/python"))
    assert repairs(plan, "R6") == [] and findings(plan, "R6") == []
