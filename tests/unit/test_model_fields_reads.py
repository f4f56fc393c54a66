"""What the field generator (compat_build/model_fields.py) counts as a read of the configuration:
attributes and getattr, and a getter called the same way (the Gemma 4 backport reads its full
layers' head size through `_get(config, "global_head_dim", default)`); a constructor handed the
configuration and a string reads no field."""

from compat_build.model_fields import fields_read

SOURCE = """
def _get(config, key, default=None):
    return getattr(config, key, default)

class Layer:
    def __init__(self, config):
        self.width = config.hidden_size
        self.eps = getattr(config, "rms_norm_eps", 1e-6)
        self.head = _get(config, "global_head_dim", 512)
        self.kv = helpers.get_field(config, "num_global_key_value_heads")
        self.model = BaiChuanBaseForCausalLM(config, "ROPE")
        self.other = _get(tokenizer, "pad_token")
"""


def test_getters_called_with_the_configuration_are_reads_and_constructors_are_not():
    assert fields_read(SOURCE) == {"hidden_size", "rms_norm_eps", "global_head_dim", "num_global_key_value_heads"}
