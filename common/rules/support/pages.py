"""The rules' pages: each rule's kind, title, fix, and the engine log lines that show its failure.

Data, apart from the rules' logic: triage matches the signatures against failure logs, and
`explain`, doctor and the plan print the titles and fixes. A rule's "why" stays its module's
docstring, beside the code it explains; a rule whose signatures are computed from a table
(R10's backports, R13's config names) keeps them in its module.
"""

from __future__ import annotations

from ...code_kinds import CHECK, RUNTIME

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, Tuple


class Page:
    """What `explain CODE` and triage know of one rule, apart from its module's docstring."""

    __slots__ = ("kind", "title", "fix", "signatures")

    def __init__(self, kind: str, title: str, fix: str, signatures: Tuple[str, ...] = ()) -> None:
        # RUNTIME (R*, H*: it may add arguments), or CHECK (it only finds what no repair fixes,
        # so doctor can say "fails" before the platform tries).
        self.kind, self.title, self.fix, self.signatures = kind, title, fix, tuple(signatures)


PAGES: Dict[str, Page] = {
    # What vLLM prints for a directory without config.json says nothing of an adapter (0.11:
    # "Invalid repository ID or local directory", 0.5.5: "Unrecognized model"); the model
    # directory tells, so no log line claims this code.
    "ADAPTER": Page(
        CHECK,
        "an adapter, not a model",
        "submit the base model (merged with the adapter, or serve the adapter with --enable-lora on top of it)",
    ),
    # Nothing fails: the engine serves other tokens, so no log line points here.
    "C1": Page(
        CHECK,
        "this engine computes this configuration differently",
        "serve the model on an engine whose conformance cell is exact (`doctor --card all` shows each card's tokens); "
        "a backport of the architecture for this engine generation closes the cell",
    ),
    "CONFIG": Page(
        CHECK,
        "config model type unknown to the engine's transformers",
        "serve the model on a card variant whose transformers knows its model_type (a newer engine)",
        (
            r"has model type `[^`]+` but Transformers does not recognize this architecture",
            r"Unrecognized model in \S+\. Should have a `model_type` key",
        ),
    ),
    # The refusal, not the warning the same text makes under VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (then
    # the engine goes on, and whatever stops it later is another class).
    "CTX": Page(
        CHECK,
        "--max-model-len longer than the engine derives for the model",
        "give --max-model-len no longer than the length the finding names (or serve on an engine that keeps the model's windows)",
        (r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len .*To allow overriding this maximum",),
    ),
    # vLLM's backends all raise "Head size N is not supported by <backend>." (0.5.5 to 0.11.0).
    "H1": Page(
        RUNTIME,
        "attention head size outside the card's kernels",
        "per card: a FLEX fallback (nothing to do), VLLM_USE_FLASH_ATTN_PA=0, or the paged-attention head-size list patched at start",
        (r"Head size \d+ is not supported by \w+",),
    ),
    "H2": Page(
        RUNTIME,
        "head_dim read as None by the engine",
        "write the explicit head size into config.json (a model view where the engine has no flag for it)",
        (r"unsupported operand type\(s\) for \*: 'int' and 'NoneType'",),
    ),
    "KV": Page(
        CHECK,
        "the model's weights or one request's KV cache do not fit the card's memory",
        "serve it with the tensor-parallel size the finding names (--tensor-parallel-size), or a --max-model-len no longer "
        "than the one it names; a lower --max-num-seqs, fp8 --kv-cache-dtype or a higher --gpu-memory-utilization also help",
        (
            r"is larger than the maximum number of tokens that can be stored in KV cache",
            r"KV cache is needed, which is larger than the available KV cache memory",
        ),
    ),
    "QUANT": Page(
        CHECK,
        "quantization method unknown to the engine",
        "submit weights in a format this card's vLLM loads (unquantized, or a method it lists), or use a newer engine",
        (r"Unknown quantization method: \S+",),
    ),
    # Healthy logs print `trust_remote_code=True` in the engine config: only the refusal counts.
    "REMOTE_CODE": Page(
        CHECK,
        "the model needs its own Python code",
        "pass --trust-remote-code if the platform allows it; no repair can stand in for the model's code",
        (r"Please pass the argument `trust_remote_code=True`", r"contains custom code which must be executed"),
    ),
    "R2": Page(
        RUNTIME,
        "no chat template",
        "pass --chat-template with a ChatML or plain role template written to the work dir",
        (
            r"default chat template is no longer allowed",
            r"does not define one and no template argument was given",
            r"Cannot use chat template functions because tokenizer\.chat_template is not set",
        ),
    ),
    "R3": Page(
        RUNTIME,
        "extra_special_tokens is a list (transformers 5 format)",
        "overlay tokenizer_config.json with the list moved to additional_special_tokens, passed with --tokenizer",
        (r"AttributeError: 'list' object has no attribute 'keys'",),
    ),
    "R3b": Page(
        RUNTIME,
        "tokenizer_class unknown to the engine's transformers",
        "overlay tokenizer_config.json naming a class the engine has, passed with --tokenizer, kept only when verified",
        (r"Tokenizer class \S+ does not exist or is not currently imported",),
    ),
    # A mapped model_type fails silently (vLLM 0.11.0 serves the invented BOS id, a padding row
    # of its embedding, and answers 200 with wrong text); an unmapped one stops the start.
    "R3c": Page(
        RUNTIME,
        "tokenizer.json without tokenizer_config.json",
        "overlay a tokenizer_config.json (PreTrainedTokenizerFast, the model's special tokens), passed with --tokenizer, "
        "kept only when verified",
        (r"Unrecognized configuration class \S+ to build an AutoTokenizer",),
    ),
    "R4": Page(
        RUNTIME,
        "architecture not registered in the engine",
        "serve as the model_type's canonical class (--hf-overrides or a model view); else a newer engine",
        (
            r"Model architectures \[[^\]]*\] are not supported for now",
            r"\S+ is not a registered model in the Transformers library",
            r"The Transformers implementation of \S+ is not compatible with vLLM",
        ),
    ),
    # Nothing fails: the model loads and generates wrong text, so no log line points here
    # (doctor finds it from the model directory instead).
    "R5": Page(
        RUNTIME,
        "config.json in a newer format than the engine reads",
        "restore the silently lost rope_theta / rope_scaling / dtype through --hf-overrides (or the engine's own flags)",
    ),
    "R6": Page(
        RUNTIME,
        "processor files in transformers 5 form",
        "serve a model view with the legacy preprocessor_config.json and the repaired tokenizer files where the engine loads the processor",
        (
            r"does not appear to have a file named preprocessor_config\.json",
            r"Failed to load the processor\. If the processor is a custom processor",
            r"Unrecognized image processor in",
        ),
    ),
    "R7": Page(
        RUNTIME,
        "vendor module missing from the image",
        "prepend the pure-PyTorch shim directory to PYTHONPATH, only when the real module is absent",
        (
            r"No module named '?ixformer\.contrib\.vllm\.layers'?",
            # With less of ixformer there, Python names the first missing package; the traceback's
            # source line still shows this import.
            r"from ixformer\.contrib\.vllm\.layers import mixtral_decoder_layer_forward",
        ),
    ),
    "R8": Page(
        RUNTIME,
        "MoE experts stored fused (transformers 5 layout)",
        "the image's vLLM plugin splits the fused experts at load (engines with general plugins); "
        "elsewhere re-save the model with transformers 5's save_pretrained(..., save_original_format=True)",
        (
            r"KeyError: '[\w.]*\.experts\.(?:gate_up_proj|down_proj)'",
            r"no module or parameter named '[\w.]*\.mlp' in MixtralModel",
        ),
    ),
    "R9": Page(
        RUNTIME,
        "vision tower weights without their vision_model level (transformers 5 layout)",
        "the image's vLLM plugin renames them to the published layout at load (engines with general plugins); "
        "elsewhere re-save the weights with `vision_tower.` names under `vision_tower.vision_model.`",
        (
            # vLLM 0.11.0 and 0.5.5 (seen): the first tower tensor a CLIP or SigLIP tower looks up.
            r"KeyError: 'embeddings\.(?:class_embedding|patch_embedding\.(?:weight|bias)|position_embedding\.weight)'",
            # vLLM 0.32 (its AutoWeightsLoader, read from its source).
            r"no module or parameter named 'vision_tower\.(?:embeddings|encoder|pre_layrnorm|post_layernorm|head)' in",
        ),
    ),
    # Its signature names the classes the image has a backport of: the rule module builds it.
    "R10": Page(
        RUNTIME,
        "architecture backported to the engine",
        "the image's vLLM plugin registers its backport of the class (engines whose layer API it fits); elsewhere a newer engine",
    ),
    "R11": Page(
        RUNTIME,
        "fused MoE without a CPU path on a CPU build",
        "the image's vLLM plugin gives the fused MoE layer a CPU path (grouped experts); on the card the vendor's kernel runs it",
        (r"The CPU backend currently does not support MoE",),
    ),
    # The engine's refusal of an unknown type stays CONFIG's in triage: reading the config is not
    # starting the model, and none of these architectures is served by the engines here without a
    # backport (R4), so "a newer engine" is the fix a failure log should name.
    "R12": Page(
        RUNTIME,
        "config class the engine's transformers lacks, registered from the image",
        "the image registers its config class for the model type with the engine's AutoConfig (COMPAT_CONFIGS); elsewhere a newer engine",
    ),
    # Its signatures name each engine's config classes and the names they read: the rule module
    # builds them from its table.
    "R13": Page(
        RUNTIME,
        "a config name the engine's model code reads and the config does not carry",
        "state the name with the value the config carries under another (--hf-overrides, or a rewritten config.json)",
    ),
}
