"""KV: the model does not fit the card's memory: its weights, or one request's KV cache of --max-model-len.

vLLM loads the weights of its rank, runs one forward pass over its token budget to find its peak,
and gives the KV cache what --gpu-memory-utilization grants of the device beyond that. When the
weights leave no room it stops ("No available memory for the cache blocks", or a CUDA out of
memory while loading: triage's OOM); when the room cannot hold one request of max_model_len
tokens it refuses to start: "The model's max seq len (131072) is larger than the maximum number
of tokens that can be stored in KV cache" (vLLM 0.5.5), "... KV cache is needed, which is larger
than the available KV cache memory" (0.11). A Llama-3.1-8B holds 16 GB of weights and needs
16 GiB for one sequence of its 131072 positions: one 32 GB BI-100 cannot hold both. doctor reads
the weights from the safetensors headers (never the weights; a directory of no weight files has
them estimated from config.json's shapes, and says so), the KV cache per token from
config.json (GQA, MLA's latent, windowed and linear-attention layers), the card's device
memory and node (card.toml [device]; COMPAT_DEVICE_MEMORY_GIB and COMPAT_DEVICES_PER_NODE
override them) and the engine's own KV check and defaults (profile fact `memory`, read from its
source), and judges the start the platform's arguments describe (tensor and pipeline parallel
sizes, --max-model-len, --gpu-memory-utilization, --dtype, --kv-cache-dtype, --quantization,
--max-num-seqs); without arguments it names the smallest tensor-parallel size of one node that
holds the model and fails only where a whole node cannot. Only doctor runs it (at container start
the engine decides for itself; reading every header is not worth the start-up time).
"""

from __future__ import annotations

from ..plan import Finding
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict

    from ..memory.memory_fit import Assessment


class KvMemory(Rule):
    code = "KV"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        if not ctx.doctor:
            return outcome
        from ..memory.memory_fit import assess

        result = assess(
            ctx.model,
            ctx.profile,
            ctx.user,
            ctx.env,
            config_edits=ctx.config_edits,
            per_layer=ctx.layer_heads,
            whole_windows=ctx.whole_windows,
        )
        data = result.to_json()
        ctx.facts["memory"] = data  # doctor reports it as `memory`
        if result.fits is None or result.judged is None:
            return outcome
        if result.fits:
            if not result.given and result.judged.tp > 1:
                outcome.findings.append(self.finding("info", self._fits_on(result, data)))
            return outcome
        # Weights that leave no room are triage's OOM (the engine's log says out of memory); a
        # KV cache too small for one request is this rule's own refusal.
        message = self._why(result, data, ctx.profile.vllm_version) + "; " + self._what_fits(result, data)
        outcome.findings.append(Finding(result.judged.code or self.code, "error", message))
        return outcome

    def _fits_on(self, result: Assessment, data: Dict[str, Any]) -> str:
        per = data["per_device"]
        return (
            f"the weights ({data['weights_gib']:.1f} GiB{_estimated(data)}) and one request of {data['max_model_len']} tokens "
            f"({per['kv_needed_gib']:.1f} GiB of KV cache per device) fit with --tensor-parallel-size {data['tensor_parallel_size']} "
            f"on a node of {data['devices_per_node']}; fewer devices cannot hold them"
        )

    def _why(self, result: Assessment, data: Dict[str, Any], version: str) -> str:
        judged, per = result.judged, data["per_device"]
        sizes = f"--tensor-parallel-size {judged.tp}" + (f" --pipeline-parallel-size {judged.pp}" if judged.pp > 1 else "")
        where = f"with {sizes}" if result.given else f"even with {sizes}, a whole node"
        if judged.code == "OOM":
            usable = f" of the {per['usable_gib']:.1f} GiB --gpu-memory-utilization {result.util:g} grants" if per.get("usable_gib") else ""
            return (
                f"the weights take {per['weights_gib']:.1f} GiB per device {where}{usable} (total {data['weights_gib']:.1f} GiB{_estimated(data)}): "
                f"no room is left for the KV cache, the engine stops out of memory"
            )
        return (
            f"one request of --max-model-len {judged.length} needs {per['kv_needed_gib']:.1f} GiB of KV cache per device {where}, "
            f"and {per['kv_space_gib']:.1f} GiB is left beside {per['weights_gib']:.1f} GiB of weights{_estimated(data)}: vLLM "
            f"{version} refuses to start (larger than the KV cache can store)"
        )

    def _what_fits(self, result: Assessment, data: Dict[str, Any]) -> str:
        judged, node = result.judged, data["devices_per_node"]
        parts = []
        if result.smallest_tp and result.smallest_tp != judged.tp:
            parts.append(f"--tensor-parallel-size {result.smallest_tp} on a node of {node} holds --max-model-len {judged.length}")
        if result.largest_len:
            parts.append(f"the largest --max-model-len that starts with --tensor-parallel-size {judged.tp} is {result.largest_len}")
        if not parts:
            parts.append(f"no tensor-parallel size of a node of {node} holds it at --max-model-len {judged.length}")
        return "; ".join(parts)


def _estimated(data: Dict[str, Any]) -> str:
    return ", estimated from config.json: the directory holds no weight files" if data.get("estimated") else ""


RULE = KvMemory()
