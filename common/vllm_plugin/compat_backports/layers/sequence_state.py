"""Which slot of a recurrent model's state pool each sequence of a batch holds (Qwen3.5's Gated
DeltaNet layers keep a fixed-size state per sequence, not a KV cache the engine pages).

vLLM 0.5.5's protocol for such models (Jamba's): the model runner hands the model, each step,
`request_ids_to_seq_ids` (the batch's requests in batch order, each with its sequence ids) and
`finished_requests_ids` (requests ended since the last step, aborted ones included); the model
keeps the state itself. This class turns those into slot numbers:
- a finished request's slots are free again;
- a prompt that starts from nothing (no computed context: a new request, or one preempted and
  recomputed from its tokens) gets a slot whose state is cleared; a prompt chunk that continues
  a sequence (chunked prefill) keeps its slot;
- a decode sequence keeps its slot across steps, and across swap-out and swap-in (the state
  never lived in the engine's KV blocks); a sequence new to a running request (parallel sampling
  forks its children after the prompt) starts from a copy of its sibling's state;
- a sequence that should have a state and has none is an error, never a silent zero state.
Standard library only: the bookkeeping is tested without torch or vLLM.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, List, Mapping, Sequence, Tuple


class StepPlan:
    """One step's slots: `slots[i]` is the batch's i-th sequence's; `clear` the slots to zero
    and `copies` the (from, to) slots to copy before the layers run."""

    __slots__ = ("slots", "clear", "copies")

    def __init__(self) -> None:
        self.slots: List[int] = []
        self.clear: List[int] = []
        self.copies: List[Tuple[int, int]] = []


class SequenceSlots:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held: Dict[str, Dict[int, int]] = {}  # request id -> sequence id -> slot
        self.free: List[int] = list(range(capacity - 1, -1, -1))  # popped from the end: slot 0 first

    def grow(self, capacity: int) -> None:
        """More slots (the pool grew to `capacity`)."""
        self.free[:0] = list(range(capacity - 1, self.capacity - 1, -1))
        self.capacity = capacity

    def release(self, finished: Iterable[str]) -> None:
        for request in finished:
            self.free.extend(self.held.pop(request, {}).values())

    def _take(self, request: str, seq: int) -> int:
        if not self.free:
            raise MemoryError("no free recurrent-state slot")  # the caller grows the pool and asks again
        slot = self.free.pop()
        self.held.setdefault(request, {})[seq] = slot
        return slot

    def plan(self, batch: Mapping[str, Sequence[int]], fresh: Sequence[bool]) -> StepPlan:
        """The slots of the batch's sequences (flattened in `batch`'s order); `fresh[i]`: the i-th
        sequence is a prompt with nothing computed before it. Raises MemoryError when the pool is
        full (nothing changed: the caller grows it and plans again), ValueError when a sequence
        that continues has no state."""
        flat = [(request, seq) for request, seqs in batch.items() for seq in seqs]
        if len(flat) != len(fresh):
            raise ValueError(f"recurrent state: {len(flat)} sequences in the batch, {len(fresh)} token runs")
        needed = 0
        for (request, seq), new in zip(flat, fresh, strict=True):
            held = self.held.get(request, {})
            if seq in held:
                continue
            needed += 1
            if not new and not held:
                raise ValueError(
                    f"recurrent state: sequence {seq} of request {request} continues, but no state was kept for it "
                    "(a prompt served from a cached prefix, or a runner that does not hand the model its requests)"
                )
        if needed > len(self.free):
            raise MemoryError(f"recurrent state: {needed} sequences need a slot, {len(self.free)} free")
        plan = StepPlan()
        for (request, seq), new in zip(flat, fresh, strict=True):
            slot = self.held.get(request, {}).get(seq)
            if slot is None:
                siblings = list(self.held.get(request, {}).values())
                slot = self._take(request, seq)
                if not new:
                    plan.copies.append((siblings[0], slot))  # a fork: its sibling's state (checked above)
            if new:
                plan.clear.append(slot)
            plan.slots.append(slot)
        return plan
