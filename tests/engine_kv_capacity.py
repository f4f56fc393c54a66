"""Run under an engine's Python: for each {"model", "max_model_len", "tp"} on stdin (a JSON list),
what the engine's own KV arithmetic on this CPU says, in one process. Prints one JSON list of
{"refused": the engine's message or null, "capacity": the longest max_model_len its KV space
holds, as the engine computes it, "block_size": the engine's}. Python 3.10.

vLLM 0.5.5: EngineArgs(...).create_engine_config() and the CPU executor's own config checks (the
bfloat16 cast, VLLM_CPU_KVCACHE_SPACE), then CPUWorker.determine_num_available_blocks (block
bytes from CPUCacheEngine.get_cache_block_size) and CPUWorker._validate_num_cpu_blocks: the
methods `vllm serve` runs, called with the engine's own config objects.
vLLM 0.11: EngineArgs(...).create_engine_config() (the CPU platform sets the block size and the
KV space), CPUWorker.determine_available_memory, one FullAttentionSpec per attention layer as its
model runner builds them for a decoder-only attention model (block size, KV heads per rank and
head size from the engine's ModelConfig, the KV dtype), and get_kv_cache_configs, which refuses
as the engine core does; its estimate_max_model_len gives the capacity.
"""

import json
import sys
from types import SimpleNamespace


def v055(model: str, length: int, tp: int) -> dict:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.executor import cpu_executor
    from vllm.worker.cpu_worker import CPUCacheEngine, CPUWorker

    # Without Ray, a CPU start of several ranks runs them as processes ("mp").
    backend = "mp" if tp > 1 else None
    args = EngineArgs(
        model=model, tokenizer=model, max_model_len=length, dtype="bfloat16", tensor_parallel_size=tp, distributed_executor_backend=backend
    )
    config = args.create_engine_config()
    model_config = cpu_executor._verify_and_get_model_config(config.model_config)
    cache_config = cpu_executor._verify_and_get_cache_config(config.cache_config)
    block = CPUCacheEngine.get_cache_block_size(cache_config.block_size, cache_config.cache_dtype, model_config, config.parallel_config)
    worker = SimpleNamespace(cache_config=cache_config, model_config=model_config, get_cache_block_size_bytes=lambda: block)
    blocks, _ = CPUWorker.determine_num_available_blocks(worker)
    try:
        CPUWorker._validate_num_cpu_blocks(worker, blocks)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    return {"refused": refused, "capacity": cache_config.block_size * blocks, "block_size": cache_config.block_size}


def v011(model: str, length: int, tp: int) -> dict:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.core.kv_cache_utils import estimate_max_model_len, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.cpu_worker import CPUWorker

    def configured(max_len: int):
        args = EngineArgs(model=model, max_model_len=max_len, dtype="bfloat16", tensor_parallel_size=tp, skip_tokenizer_init=True)
        vllm_config = args.create_engine_config(UsageContext.OPENAI_API_SERVER)
        mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
        dtype = mc.dtype if cc.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cc.cache_dtype]
        spec = FullAttentionSpec(block_size=cc.block_size, num_kv_heads=mc.get_num_kv_heads(pc), head_size=mc.get_head_size(), dtype=dtype)
        specs = {f"model.layers.{i}.self_attn.attn": spec for i in range(mc.get_num_layers(pc))}
        return vllm_config, specs, CPUWorker.determine_available_memory(SimpleNamespace(cache_config=cc)), cc.block_size

    vllm_config, specs, available, block = configured(length)
    try:
        get_kv_cache_configs(vllm_config, [specs], [available])
        refused = None
    except ValueError as exc:
        refused = str(exc)
    whole, whole_specs, _, _ = configured(None)  # the length the config allows: the search's ceiling
    return {"refused": refused, "capacity": estimate_max_model_len(whole, whole_specs, available), "block_size": block}


def main() -> None:
    import vllm

    judge = v055 if vllm.__version__.startswith("0.5.") else v011
    out = []
    for case in json.loads(sys.stdin.read()):
        out.append(judge(case["model"], case["max_model_len"], case.get("tp", 1)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
