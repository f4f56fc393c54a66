"""C1: the conformance matrix found that this engine does not compute this configuration as the
author's transformers does.

Every other rule proves that the engine gets past the model's metadata. The conformance matrix
(conformance/ in the repository; its results baked into the image as conformance_cells.json)
proves what comes after: tiny models of each architecture in the configurations popular
checkpoints use, served through this card's launcher on its engine generation, their greedy
tokens compared with the author's transformers. A cell that was not exact names its culprit: the
traits in which it differs from the nearest exact cell of its architecture (widened until no
exact cell shares them all). A model with those traits inherits the cell's result, whatever
else its configuration says: a known difference is a failure wherever it appears. `differs` is the worst failure there is: the
engine starts, answers 200, and computes another function, so the platform's evaluation fails
while every log says all is well. C1 makes that an error (doctor: fails), loudly logged at
start (vLLM still starts: a preflight never blocks a start). A cell that did not answer on the
CPU build of the engine, for a reason of that build alone (a CPU kernel the card does not run:
its MoE, its attention backend, a worker that died in a kernel), proves nothing for the card:
that is "unverified", never a promised start. A refusal another rule reports (an architecture
the engine lacks, a context longer than the engine derives) is that rule's.
"""

from __future__ import annotations

from ..engine.conformance_cells import failing_start
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict

# Triage codes of causes that belong to the CPU build the matrix runs, not to the card's engine.
CPU_BUILD_CODES = ("CPU", "DEVICE")


def acts_on(cell: Dict[str, Any]) -> bool:
    """Whether C1 speaks for this cell: the engine answered other tokens, or did not answer for
    a reason no other rule names (the CPU build's own, or none triage knows)."""
    result, code = cell.get("result"), cell.get("code")
    return result == "differs" or (result in ("refused", "crashed", "error") and (code is None or code in CPU_BUILD_CODES))


class Conformance(Rule):
    code = "C1"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        cell = failing_start(ctx.profile.card, config, ctx.user)
        if cell is None or not acts_on(cell):
            return outcome
        engine = f"vLLM {ctx.profile.vllm_version}"
        name = f"conformance cell {cell.get('variant')} ({cell.get('architecture')}, saved by transformers {cell.get('saved_by')})"
        result, code = cell.get("result"), cell.get("code")
        if result == "differs":
            step = cell.get("first_difference")
            where = f" from generated token {step + 1}" if isinstance(step, int) else ""
            outcome.findings.append(
                self.finding(
                    "error",
                    f"{engine} computes this configuration differently from the author's transformers: {name} answered other greedy tokens{where}",
                )
            )
        elif result in ("refused", "crashed") and (code in CPU_BUILD_CODES or cell.get("signal")):
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"on the CPU build of {engine}, {name} {result} for a reason of that build ({cell.get('cause') or code}); "
                    "the card runs its own kernels there: whether this configuration serves right on it is unproven",
                )
            )
        else:
            outcome.findings.append(
                self.finding("error", f"{engine} {result} on this configuration: {name} ({cell.get('cause') or 'see the cell'})")
            )
        return outcome


RULE = Conformance()
