"""The CPU build's model runner of vLLM 0.5.5 hands a model with recurrent state its requests.

vLLM 0.5.5's GPU model runner gives a model whose layers are not all attention (the model
config's `layers_block_type`, Jamba's) two more arguments each step: `request_ids_to_seq_ids`
(the batch's requests, in batch order, with their sequence ids) and `finished_requests_ids`. Its
CPU runner gives neither: the scheduler's finished ids reach `prepare_model_input` and stop there.
Installed by the plugin when it registers a backport that keeps per-sequence state in a pool of
its own (Backport.recurrent == OWN_POOL: the 0.5.5 generation's; a V1 engine keeps a hybrid's
states itself), this teaches the CPU runner the GPU runner's protocol: its model input
carries both (broadcast to the other workers with the rest of the input), and `execute_model`
passes them to such a model's forward. Every other model runs the engine's code unchanged; on
the card the vendor's GPU runner passes them itself.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

RUNNER = ("vllm.worker.cpu_model_runner", "CPUModelRunner", "CPUModelInput")
KEYS = ("request_ids_to_seq_ids", "finished_requests_ids")


def _input_class(base: Any) -> Any:
    """The CPU model input with the two fields, broadcast with the rest."""
    import dataclasses
    from typing import Dict, List, Optional

    @dataclasses.dataclass(frozen=True)
    class CPUModelInputWithRequests(base):  # type: ignore[misc, valid-type]
        request_ids_to_seq_ids: Optional[Dict[str, List[int]]] = None
        finished_requests_ids: Optional[List[str]] = None

        def as_broadcastable_tensor_dict(self) -> Dict[str, Any]:
            out = super().as_broadcastable_tensor_dict()
            out.update({key: getattr(self, key) for key in KEYS})
            return out

    return CPUModelInputWithRequests


def _wrap(runner: Any, with_requests: Any) -> None:
    import dataclasses
    import functools

    prepare: Callable[..., Any] = runner.prepare_model_input
    execute: Callable[..., Any] = runner.execute_model
    rebuild: Callable[..., Any] = runner.make_model_input_from_broadcasted_tensor_dict

    def stateful(self: Any) -> bool:
        return bool(getattr(type(self.model), "has_inner_state", False))

    @functools.wraps(prepare)
    def prepare_model_input(self: Any, seq_group_metadata_list: Any, virtual_engine: int = 0, finished_requests_ids: Any = None) -> Any:
        model_input = prepare(self, seq_group_metadata_list, virtual_engine, finished_requests_ids)
        if not stateful(self):
            return model_input
        fields = {f.name: getattr(model_input, f.name) for f in dataclasses.fields(model_input)}
        # The runner lays out a batch group by group, each group's sequences in seq_data's order.
        requests = {group.request_id: list(group.seq_data) for group in seq_group_metadata_list}
        return with_requests(**fields, request_ids_to_seq_ids=requests, finished_requests_ids=list(finished_requests_ids or []))

    @functools.wraps(rebuild)
    def make_model_input_from_broadcasted_tensor_dict(self: Any, tensor_dict: Any) -> Any:
        if not stateful(self):
            return rebuild(self, tensor_dict)
        return with_requests.from_broadcasted_tensor_dict(tensor_dict, attn_backend=self.attn_backend)

    @functools.wraps(execute)
    def execute_model(self: Any, model_input: Any, kv_caches: Any, *rest: Any, **kw: Any) -> Any:
        requests = getattr(model_input, KEYS[0], None)
        if requests is None or not stateful(self):
            return execute(self, model_input, kv_caches, *rest, **kw)
        model = self.model
        # The engine's execute_model calls the model with the standard arguments; the forward it
        # finds for this step carries the two more, as the GPU runner passes them.
        model.forward = functools.partial(
            type(model).forward, model, request_ids_to_seq_ids=requests, finished_requests_ids=model_input.finished_requests_ids
        )
        try:
            return execute(self, model_input, kv_caches, *rest, **kw)
        finally:
            del model.forward

    prepare_model_input.compat_requests = True  # type: ignore[attr-defined]
    runner.prepare_model_input = prepare_model_input
    runner.make_model_input_from_broadcasted_tensor_dict = make_model_input_from_broadcasted_tensor_dict
    runner.execute_model = execute_model


def install(log: Any) -> bool:
    """Teach the CPU runner (once per process). False where the engine has no CPU runner of this
    shape (the card's GPU runner passes the requests itself)."""
    import importlib

    try:
        module = importlib.import_module(RUNNER[0])
        runner, base = getattr(module, RUNNER[1]), getattr(module, RUNNER[2])
    except (ImportError, AttributeError):
        log.info("recurrent state: no %s.%s in this engine; its model runner hands the model its requests", RUNNER[0], RUNNER[1])
        return False
    if getattr(runner.prepare_model_input, "compat_requests", False):
        return True
    _wrap(runner, _input_class(base))
    log.info("recurrent state: %s.%s hands a model with inner state its requests, as the GPU runner does", RUNNER[0], RUNNER[1])
    return True
