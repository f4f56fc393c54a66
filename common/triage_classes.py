"""What triage recognises besides the rules' own log signatures. Data only.

BUILD_PATCHES: failures the images fix at build time (L*), for logs from stock images.
ENGINE_LIMITS: honest classes no repair of this project fixes; each says what to do instead.
CARD_ALIASES: how a card shows up in a log's path when --card is not given.
Order matters: the first class whose pattern matches a log wins, rules before these.
"""

# (code, title, fix, patterns)
BUILD_PATCHES = (
    ("L1", "transformers 4.x cannot read a list of extra_special_tokens",
     "use the compat image (L1 patches transformers at build time; R3 repairs the model's tokenizer config)",
     (r"_set_model_specific_special_tokens",)),
    ("L3", "an ixformer op the BI-100 vLLM calls is missing",
     "use the compat image (L3 installs the missing ixformer ops at build time)",
     (r"module 'ixformer\.functions' has no attribute '\w+'", r"cannot import name '\w+' from 'ixformer\.functions'")),
)

ENGINE_LIMITS = (
    ("OOM", "out of memory",
     "lower --max-model-len / --max-num-seqs, raise --gpu-memory-utilization, or use more cards (tensor parallel)",
     (r"out of memory", r"OutOfMemoryError", r"larger than the available KV cache memory",
      r"No available memory for the cache blocks", r"Cannot allocate memory", r"can't allocate memory", r"OOMKilled")),
    ("DEVICE", "accelerator or driver error",
     "check the card and its driver (device visibility, driver/runtime versions); the model is not the cause",
     (r"CUDA error", r"No CUDA GPUs are available", r"NCCL error", r"HIP error", r"hipError\w+", r"device-side assert",
      r"cudaError\w+", r"Failed to infer device type", r"Found no NVIDIA driver", r"Torch not compiled with CUDA enabled")),
    # Healthy logs print `trust_remote_code=True` in the engine config: only the refusal counts.
    ("REMOTE_CODE", "the model needs its own Python code",
     "pass --trust-remote-code if the platform allows it; no repair can stand in for the model's code",
     (r"Please pass the argument `trust_remote_code=True`", r"contains custom code which must be executed")),
    ("GGUF", "a GGUF checkpoint",
     "serve it with a GGUF engine (llama.cpp) or submit safetensors weights",
     (r"GGUF (?:file|model|checkpoint)", r"\S+\.gguf\b")),
    ("NETWORK", "the engine tried to reach the network",
     "the platform runs offline: the model directory must hold every file (config, tokenizer, weights)",
     (r"Max retries exceeded with url", r"Temporary failure in name resolution", r"couldn't connect to 'https?://",
      r"Connection refused")),
)

CARD_ALIASES = {
    "iluvatar-bi100": ("iluvatar-bi100", "iluvatar", "bi100", "bi-100"),
    "hygon-k100": ("hygon-k100", "hygon", "k100", "dcu"),
    "nv-a100": ("nv-a100", "a100", "nvidia"),
}
