"""Every code the project speaks, in one registry: `python3 -m common explain CODE` reads it.

The runtime rules' pages are theirs (common/rules/support/pages.py, each rule module's docstring
its why); this module adds what is not a runtime rule: build-time patches and checks (L*, applied in the image build,
compat_build/patches/), the honest classes triage gives failures no repair fixes, and the codes
a plan's findings use for the model directory and the arguments. Manifest validation, triage,
doctor and `explain` all read this registry; nothing else lists codes. Codes are matched
case-insensitively everywhere (`COMPAT_SKIP=r3b` skips R3b).
"""

from __future__ import annotations

from .code_kinds import BUILD_CHECK, BUILD_PATCH, CHECK, FINDING, TRIAGE_ONLY

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple


class Code:
    """One code's page: what it is, why it exists, what fixes it, and the log lines that show it."""

    __slots__ = ("code", "kind", "title", "why", "fix", "signatures")

    def __init__(self, code: str, kind: str, title: str, why: str, fix: str, signatures: Tuple[str, ...] = ()) -> None:
        self.code, self.kind, self.title, self.why, self.fix = code, kind, title, why, fix
        self.signatures = tuple(signatures)

    def __repr__(self) -> str:
        return f"Code({self.code!r}, {self.kind!r})"


# Build-time patches and checks: the image build applies them to the image's own libraries.
# Their transforms live in compat_build/patches/ (shared) or cards/<card>/patches/ (one card's).
BUILD = (
    Code(
        "L1",
        BUILD_PATCH,
        "transformers 4.x cannot read a list of extra_special_tokens",
        "transformers 5 saves `extra_special_tokens` as a list; transformers 4.x calls `.keys()` on it in "
        "`_set_model_specific_special_tokens` and every such tokenizer fails to load. In 4.x the dict form "
        'names attributes (`image_token` -> `tok.image_token_id`); a v5 list means "these are special '
        'tokens", which 4.x calls `additional_special_tokens`: the patch adds them there, so every id stays the '
        "one the author saved. The runtime R3 overlay repairs the same case per model; L1 covers transformers "
        "loads the overlay cannot reach (remote code, pipelines).",
        "use the compat image (L1 patches transformers at build time; R3 repairs the model's tokenizer config)",
        (r"_set_model_specific_special_tokens",),
    ),
    Code(
        "L2",
        BUILD_CHECK,
        "vLLM's Triton attention head-size check",
        "Decided from vLLM 0.11.0's real `vllm/v1/attention/backends/triton_attn.py`: `validate_head_size` "
        "rejects only sizes below 32 (the kernel's real limit), and with no backend forced vLLM falls back to "
        "FLEX_ATTENTION for sizes FlashAttention lacks. No card on vLLM 0.11.0 needs a patch: L2 is a check "
        "that fails the image build if the image's vLLM brings back a fixed head-size list the preflight "
        "cannot see (then H1's policy for that card must be revisited).",
        "rebuild the image; if the L2 check fails, decide H1's head-size policy again for that vLLM",
    ),
    Code(
        "L3",
        BUILD_PATCH,
        "an ixformer op the BI-100 vLLM calls is missing",
        "Some ixformer builds on the BI-100 base image lack ops that the vendor's vLLM calls "
        "(`gelu_tanh_and_mul`). The image build copies pure-PyTorch implementations of them (the card's "
        "patches/ folder) into the vendor package and exports them from its `__init__`.",
        "use the compat image (L3 installs the missing ixformer ops at build time)",
        (r"module 'ixformer\.functions' has no attribute '\w+'", r"cannot import name '\w+' from 'ixformer\.functions'"),
    ),
)

# What doctor asks the engine itself beyond the rules (common/doctor/model_build_finding.py), and no repair fixes.
DOCTOR = (
    Code(
        "MB",
        CHECK,
        "the engine's model code refuses this configuration",
        "The engine got past the model's metadata, but refuses the model when it constructs its model class: "
        "vLLM's model code raises on configuration values it does not serve (Llama's, Qwen2's and DeepSeek's MLP on "
        "a hidden_act other than silu; Gemma 2's on an activation other than tanh-GELU; DeepSeek-V2's attention without "
        "rope_scaling on vLLM 0.5.5; attention or KV heads the --tensor-parallel-size does not divide), and so do the "
        "image's own backports on what they leave out (Gemma 4's bidirectional attention over all tokens on vLLM "
        "0.5.5); a name the model code reads that the config carries otherwise (Gemma 2's `hidden_act` on vLLM 0.11) "
        "is R13's to state. doctor finds it "
        "before the platform tries: the card's engine Python builds the model class as the image's engine would (the "
        "model view and arguments of the repairs, the image's plugin registered, the platform's tensor-parallel size) "
        "on the meta device, without weights or memory, and says the engine's own exception and the line that raised "
        "it. Where it cannot be asked (no vLLM in that Python, a failure in a part of the engine the CPU build runs "
        "differently from the card), the verdict is 'unverified'; COMPAT_SKIP=MB turns the check off.",
        "change what the engine's message names (in config.json, or through the platform's arguments such as "
        "--tensor-parallel-size), or serve the model on a card variant whose engine supports it (`doctor --card CARD` "
        "lists them)",
        (
            r"Unsupported activation: \S+\. Only silu is supported",
            r"Activation function \S+ is not supported for Gemma models",
            r"Gemma2 uses `gelu_pytorch_tanh` as the hidden activation",
            r"'\w+Config' object has no attribute '\w+'",
            r"Sliding window for some but all layers is not supported",
            r"backport: .*is not supported on this engine",
            r"assert self\.total_num_\w+ % tp_size == 0",
            r"assert tp_size % self\.total_num_kv_heads == 0",
            r"Total number of attention heads \(\d+\) must be divisible by tensor parallel size",
        ),
    ),
)

# Failures no repair of this project fixes; each says what to do instead.
TRIAGE = (
    Code(
        "CPU",
        TRIAGE_ONLY,
        "a kernel or engine path the engine's CPU build lacks",
        "The log comes from a CPU build of the engine (the stand-in the project runs each card's engine generation "
        "on: the conformance matrix, the end-to-end tests): a CPU MoE, MLA, windowed, soft-capped or ALiBi attention "
        "path it does not have, a CPU kernel's dtype or head size, Triton (disabled on the CPU), or a package of the "
        "card's image the CPU venv lacks (torchvision). On the card the vendor's kernels run that part, so the CPU "
        "build shows nothing about the card either way; doctor says 'unverified' for such configurations, never 'starts'.",
        "judge the model with the card's own image (`docker run ... IMAGE doctor`), or serve it on an engine generation "
        "whose CPU build runs it",
        (
            r"The CPU backend currently does not support MoE",
            r"MLA is not supported on CPU",
            r"sliding window \(CPU backend\) is not supported by the V1 Engine",
            r"Torch SPDA does not support logits soft cap",
            r"v1/attention/backends/cpu_attn\.py\", line \d+, in forward",
            r"CPU GDN attention requires BF16",
            r"expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8",
            r"Unsupported CPU attention configuration",
            r"attention/backends/torch_sdpa\.py\", line \d+, in \w+",
            r"fused_moe/cpu_fused_moe\.py\", line \d+, in \w+",
            r"module 'triton\.language' has no attribute",
            r"No module named 'torchvision'",
        ),
    ),
    Code(
        "OOM",
        TRIAGE_ONLY,
        "out of memory",
        "The engine ran out of accelerator or host memory: the model, its KV cache or the batch does not fit "
        "the card as configured. No metadata repair changes that.",
        "lower --max-model-len / --max-num-seqs, raise --gpu-memory-utilization, or use more cards (tensor parallel)",
        (
            r"out of memory",
            r"OutOfMemoryError",
            r"No available memory for the cache blocks",
            r"Cannot allocate memory",
            r"can't allocate memory",
            r"OOMKilled",
        ),
    ),
    Code(
        "DEVICE",
        TRIAGE_ONLY,
        "accelerator or driver error",
        "The accelerator, its driver or its runtime failed or was not visible to the container; the model is not the cause.",
        "check the card and its driver (device visibility, driver/runtime versions); the model is not the cause",
        (
            r"CUDA error",
            r"No CUDA GPUs are available",
            r"NCCL error",
            r"HIP error",
            r"hipError\w+",
            r"device-side assert",
            r"cudaError\w+",
            r"Failed to infer device type",
            r"Found no NVIDIA driver",
            r"Torch not compiled with CUDA enabled",
        ),
    ),
    Code(
        "SHM",
        TRIAGE_ONLY,
        "shared memory too small",
        "vLLM's processes share tensors through /dev/shm, and the container was given less than the engine needs "
        "(Docker's default is 64 MB). The model is not the cause.",
        "give the container more shared memory: docker run --shm-size 1g (or --ipc=host); in Kubernetes a memory-backed "
        "emptyDir mounted at /dev/shm",
        (
            r"Insufficient space in /dev/shm",
            r"insufficient shared memory \(shm\)",
            r"unable to write to file </torch_\d+",
            r"Error while creating shared memory segment",
        ),
    ),
    Code(
        "NOEXEC",
        TRIAGE_ONLY,
        "the temp dir is mounted noexec",
        "The images set HOME=/tmp, and the engine's just-in-time kernels (Triton's, torch inductor's) are "
        "compiled into caches there and loaded as shared objects; a /tmp mounted noexec refuses to map them "
        "(Docker mounts `--tmpfs /tmp` noexec unless told otherwise). The launcher says so at start when it "
        "sees HOME or the temp dir on a noexec mount. The model is not the cause.",
        "give the container a writable /tmp that allows exec: docker run --tmpfs /tmp:exec (a Kubernetes "
        "emptyDir allows it); or point HOME and TMPDIR at such a directory",
        (
            r"failed to map segment from shared object",
            r"is on a noexec mount",
            r": /tmp/\S+: Permission denied",
        ),
    ),
    Code(
        "GGUF",
        TRIAGE_ONLY,
        "a GGUF checkpoint",
        "The submission is a GGUF file (llama.cpp's format); the card images serve safetensors checkpoints.",
        "serve it with a GGUF engine (llama.cpp) or submit safetensors weights",
        # Not "GGUF file": transformers' LlamaTokenizerFast legacy warning says "if you loaded a llama
        # tokenizer from a GGUF file you can ignore this message" on healthy starts.
        (r"GGUF (?:model|checkpoint)", r"\S+\.gguf\b"),
    ),
    Code(
        "NETWORK",
        TRIAGE_ONLY,
        "the engine tried to reach the network",
        "Something the model names (a tokenizer repo, remote code, a base model) is not in the model directory, "
        "so the engine tried to download it; the platform runs offline.",
        "the platform runs offline: the model directory must hold every file (config, tokenizer, weights)",
        (
            r"Max retries exceeded with url",
            r"Temporary failure in name resolution",
            r"couldn't connect to 'https?://",
            r"Connection refused",
        ),
    ),
)

# Codes of findings about the input rather than a mismatch with the engine.
FINDINGS = (
    Code(
        "MODEL",
        FINDING,
        "the model directory cannot be used",
        "The model directory is missing, not a directory, empty, or cannot be listed. No repair is planned; "
        "vLLM still starts with the platform's arguments and reports the problem itself.",
        "mount the complete model directory at MODEL_DIR (default /model)",
    ),
    Code(
        "INPUT",
        FINDING,
        "a metadata file is unusable",
        "A metadata file is malformed JSON, a Git-LFS pointer, a symlink out of the model, unreadable, or too "
        "large to be metadata. The preflight ignores it and plans with what it could read.",
        "fix or re-upload the named file (`git lfs pull` for pointer files)",
    ),
    Code(
        "PROFILE",
        FINDING,
        "no usable engine profile for the card",
        "The card name is unknown or its engine profile is unreadable, so nothing can be decided against the "
        "engine; vLLM starts untouched.",
        "pass a known card (--card or COMPAT_CARD) or rebuild the image",
    ),
    Code(
        "ARGS",
        FINDING,
        "a repair could not be merged into the given arguments",
        "The platform's arguments hold a flag a repair needs in a form it cannot merge with (an "
        "`--hf-overrides` that is not a JSON object, or one without a value). The user's arguments win.",
        "give --hf-overrides as a JSON object",
    ),
    Code(
        "INTERNAL",
        FINDING,
        "the preflight itself failed",
        "A bug in the preflight. By design it never blocks the start: vLLM starts with the repairs completed so far.",
        "report it with the report.json of the run",
    ),
)


def runtime_codes() -> Tuple[Code, ...]:
    """The runtime rules' own pages, in the order their repairs apply."""
    from .rules import REGISTRY  # the rule modules: only callers that need them pay for the import

    return tuple(Code(r.code, r.kind, r.title, r.doc, r.fix, r.log_signatures) for r in REGISTRY)


def all_codes() -> Tuple[Code, ...]:
    """Every code; triage tries their signatures in this order (the first class that matches wins)."""
    return runtime_codes() + BUILD + DOCTOR + TRIAGE + FINDINGS


def normalize(code: str) -> str:
    """The key codes are compared by: `r3b`, `R3B` and `R3b` are one code."""
    return code.strip().upper()


def lookup(code: str, codes: Optional[Tuple[Code, ...]] = None) -> Optional[Code]:
    """The registry entry of `code` (any case), or None."""
    key = normalize(code)
    for entry in codes if codes is not None else all_codes():
        if normalize(entry.code) == key:
            return entry
    return None


def page(entry: Code) -> str:
    """The text `explain CODE` prints: ruff's `ruff rule` is the model."""
    lines = [f"{entry.code}: {entry.title}", f"kind: {entry.kind}", "", entry.why, "", f"fix: {entry.fix}"]
    if entry.signatures:
        lines += ["", "log signatures (triage):"] + [f"  {s}" for s in entry.signatures]
    return "\n".join(lines) + "\n"


def index(codes: Tuple[Code, ...]) -> str:
    width = max(len(c.code) for c in codes)
    kinds: Dict[str, List[Code]] = {}
    for c in codes:
        kinds.setdefault(c.kind, []).append(c)
    lines: List[str] = []
    for kind, members in kinds.items():
        lines.append(f"{kind}:")
        lines += [f"  {c.code:<{width}}  {c.title}" for c in members]
    return "\n".join(lines) + "\n"
