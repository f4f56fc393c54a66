"""Bake the card's runtime profile inside the image, from the image's own engine packages.

usage: python3 -m compat_build.image_steps.bake_profile CARD_JSON PROFILE_DIR

CARD_JSON is the card's manifest entry (written by `make render`); the engine part comes from
snapshot_engine run on this interpreter, so the profile describes the vLLM and transformers the
image really has. Writes PROFILE_DIR/<card>.json and PROFILE_DIR/IMAGE_CARD; exits 1 with one
line when the image has no transformers to ask (the build must stop there).
"""

import json
import os
import sys
from typing import Any, Dict

from compat_build.snapshot_engine import snapshot


def profile_json(card: Dict[str, Any], snap: Dict[str, Any]) -> Dict[str, Any]:
    """The runtime profile: the manifest's view of the card plus what its engine reports."""
    return {
        "card": card["name"],
        "vllm_version": card["vllm"],
        "transformers_version": snap["transformers_version"],
        "attention": {"head_sizes": list(card["head_sizes"]), "head_size_policy": card["head_size_policy"]},
        # One accelerator of the card and its node (card.toml [device]): memory, devices per
        # node, and the runtime's overheads beside the engine's own; None in a card.json of
        # before they were stated.
        "device": card.get("device"),
        "engine": {
            # An empty list means the snapshot had no vLLM to ask: unknown, not "supports nothing".
            "architectures": snap["architectures"] or None,
            # EngineArgs fields = `vllm serve` flags (--hf-overrides exists only from vLLM 0.6.x).
            "engine_args": snap["engine_args"] or None,
            # Whether unregistered classes can run on vLLM's Transformers backend, and which classes
            # that backend takes (is_backend_compatible); None: no vLLM to ask.
            "transformers_backend": snap["transformers_backend"],
            "backend_compatible_architectures": snap["backend_compatible_architectures"],
            "quantization_methods": snap["quantization_methods"] or None,
            # Does get_head_size survive `head_dim = None`, and which config classes produce it.
            "head_dim_none_fallback": snap["head_dim_none_fallback"],
            "null_head_dim_model_types": snap["null_head_dim_model_types"],
            "config_model_types": snap["config_model_types"],
            # Model types the engine reads with config classes of its own, without remote code
            # (model_type -> class); None: no vLLM to ask.
            "own_config_classes": snap.get("own_config_classes"),
            # What its transformers reads of the transformers-5 formats (R3, R5 decide from it).
            "reads": snap["reads"],
            # Which names each config class also answers to (R5: keys transformers 5 renamed).
            "config_attribute_maps": snap.get("config_attribute_maps"),
            # Whether `vllm serve --config FILE.yaml` is read: its flags then count as the user's.
            "serve_config_file": snap["serve_config_file"],
            # Whether it runs general plugins and has the weight iterator R8's plugin wraps.
            "general_plugins": snap["general_plugins"],
            "weights_iterator_hook": snap["weights_iterator_hook"],
            # The layer API the backports (R10) call, read from its source; None: no vLLM to ask.
            "layer_api": snap.get("layer_api"),
            # How it derives the longest context a model may be served with (--max-model-len),
            # read from its source; None: no vLLM to ask.
            "max_model_len": snap.get("max_model_len"),
            # A CPU build of the engine (its version says so), and whether its fused MoE layer
            # has a CPU path there (R11 gives it one where not).
            "cpu_build": snap.get("cpu_build"),
            "fused_moe_cpu": snap.get("fused_moe_cpu"),
            # How it sizes the KV cache and refuses a --max-model-len it cannot hold (the check,
            # its defaults, the KV layouts it knows), read from its source; None: no vLLM to ask.
            "memory": snap.get("memory"),
            "tokenizer_classes": snap["tokenizer_classes"],
            "tokenizer_model_types": snap["tokenizer_model_types"],
            "model_type_architectures": snap["model_type_architectures"],
            "transformers_architectures": snap["transformers_architectures"],
        },
    }


def render(profile: Dict[str, Any]) -> str:
    return json.dumps(profile, indent=1, sort_keys=True) + "\n"


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        card = json.load(fh)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # an image build never reaches for a model hub
    snap = snapshot()
    if not snap["transformers_version"]:
        print(f"bake_profile: {sys.executable} has no transformers; the image cannot serve models", file=sys.stderr)
        return 1
    os.makedirs(argv[1], exist_ok=True)
    with open(os.path.join(argv[1], f"{card['name']}.json"), "w", encoding="utf-8") as fh:
        fh.write(render(profile_json(card, snap)))
    with open(os.path.join(argv[1], "IMAGE_CARD"), "w", encoding="utf-8") as fh:
        fh.write(card["name"] + "\n")
    archs = len(snap["architectures"]) if snap["architectures"] else "unknown"
    print(f"profile {card['name']}: vLLM architectures {archs}, transformers {snap['transformers_version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
