"""The environment every engine start of this project's harness gets on the CPU: the tests'
servers, the image tier's containers and the conformance cells. It is on every cell's start path
(conformance/fingerprint.py), so it lives alone: the harness around it may change without making
a cell stale."""

# A small KV cache (the CPU backend reserves VLLM_CPU_KVCACHE_SPACE GiB; its default is 4), no
# hub, no usage reports, unbuffered logs.
COMMON_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}
