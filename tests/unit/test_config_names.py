"""compat_build.config_names: what carries a name the engine reads is read from the author's
sources where they tell, and the hand-read carriers (CARRIERS) still name what the author's
transformers writes. The whole search (the engine's model builds, minutes) is `make config-names`;
its table, common/engine/config_names.json, is R13's (common/tests/test_r13_rule.py)."""

import json
import subprocess
from pathlib import Path

import pytest

from compat_build.config_names import CARRIERS, carriers_of, renamed_in_source
from common.rules.r13_config_names import engine_names, stated_value

ROOT = Path(__file__).resolve().parents[2]
AUTHOR_PYTHON = ROOT / ".venv-author" / "bin" / "python"
needs_author = pytest.mark.skipif(not AUTHOR_PYTHON.exists(), reason="needs .venv-author (transformers 5): run `make author-env`")


def test_an_old_name_a_config_class_pops_into_a_key_is_its_carrier():
    source = """
class Lfm2Config:
    def __post_init__(self, **kwargs):
        self.tie_word_embeddings = kwargs.pop("tie_embedding", self.tie_word_embeddings)
        self.intermediate_size = kwargs.get("block_ff_dim", intermediate_size)
        self.vocab_size = kwargs.pop("vocab_size", 3)  # its own name: no rename
        other.x = kwargs.pop("y", 1)
"""
    assert renamed_in_source(source) == {"tie_embedding": "tie_word_embeddings", "block_ff_dim": "intermediate_size"}
    assert renamed_in_source("def (") == {}


def test_attribute_maps_and_sources_come_before_the_hand_read_carriers(tmp_path):
    source = tmp_path / "configuration_x.py"
    source.write_text("class XConfig:\n    def __init__(self, **kwargs):\n        self.width = kwargs.pop('dim', 1)\n")
    index = [{"model_type": "gemma2", "attribute_map": {"hidden_act": "act"}, "source": str(source)}]
    found = carriers_of(index)
    assert found["gemma2"]["hidden_act"] == {"key": "act"} and found["gemma2"]["dim"] == {"key": "width"}
    assert found["lfm2"]["conv_dim"] == CARRIERS["lfm2", "conv_dim"]


@needs_author
def test_the_carriers_name_what_the_authors_transformers_writes():
    """Each key a carrier of the table names is one transformers 5 writes for that model type, and
    each found name is one it does not write: R13 states the value from a key the save has."""
    table = engine_names("0.11.0")
    code = (
        "import json, sys\nfrom transformers import AutoConfig\n"
        "print(json.dumps({t: sorted(AutoConfig.for_model(t).to_dict()) for t in json.loads(sys.argv[1])}))"
    )
    proc = subprocess.run([str(AUTHOR_PYTHON), "-c", code, json.dumps(sorted(table))], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads(proc.stdout.strip().splitlines()[-1])
    for model_type, entry in table.items():
        for name, carrier in entry["names"].items():
            assert name not in written[model_type], (model_type, name)
            keys = [carrier["key"]] if "key" in carrier else carrier.get("quotient", [])
            assert set(keys) <= set(written[model_type]), (model_type, name, carrier)
            if "value" in carrier:
                assert stated_value({}, carrier) == carrier["value"]


@needs_author
def test_lfm2s_block_ff_dim_is_read_from_the_authors_own_source():
    code = "import inspect, transformers; print(inspect.getsourcefile(transformers.Lfm2Config))"
    proc = subprocess.run([str(AUTHOR_PYTHON), "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1]
    assert renamed_in_source(open(path, encoding="utf-8").read())["block_ff_dim"] == "intermediate_size"
    assert ("lfm2", "block_ff_dim") not in CARRIERS  # the source tells: no hand-read carrier
