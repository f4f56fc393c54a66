"""MB (doctor only): does the engine construct its model class for this model?

The rules and the engine-side checks show that the engine gets past the model's metadata; the
engine can still refuse the model when it constructs its model class, on a configuration value
its model code does not serve (vLLM's Llama MLP on a hidden_act other than silu, the image's
Gemma 2 backport on an activation other than tanh-GELU, a sharded layer's divisibility assert at
the platform's tensor-parallel size). After a plan is finished
(its repairs verified, its arguments joined), doctor asks the card's engine Python to build the
model class as the image's engine would: for the path vLLM is given (the model, or the model view
doctor made), with `vllm serve`'s arguments (the repairs' and the platform's), in a process with
the repairs' environment and the image's plugin registered, on the meta device
(engine_checks/model_build.py: no weights, no memory).

A refusal is a failing finding MB carrying the engine's own exception and the file:line that
raised it; a build that cannot be asked here (no vLLM in that Python, a failure of the harness or
of a part of the engine the CPU build runs differently from the card) is "unverified". A plan
that already fails is not built: its verdict is decided, and its engine would not get this far.

Launch never comes here: the image's start path stays stdlib-only and never imports torch.
COMPAT_SKIP=MB turns the check off: the verdict is then "unverified" (MB), never "starts", since
what the check would have shown was not shown.
"""

from __future__ import annotations

import os

from .. import PLUGIN_DIR
from ..start.log import say

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Mapping, Optional, Sequence

    from ..plan import Plan
    from ..start.verify import Warm

CODE = "MB"
KIND = "model_build"
# The engine Python imports vLLM and torch before the first model (5-20 s on two cores), then
# builds each model in well under a second: the process's time limit is this plus the per-model
# limit (COMPAT_VERIFY_TIMEOUT) for each model.
IMPORT_TIMEOUT_S = 180.0


def skipped(env: Mapping[str, str]) -> bool:
    """COMPAT_SKIP names MB (in any case)."""
    from ..codes import normalize

    return normalize(CODE) in {normalize(c) for c in env.get("COMPAT_SKIP", "").split(",") if c.strip()}


def request_for(plan: Plan) -> Optional[Dict[str, Any]]:
    """The engine-side request that builds `plan`'s model as the image's engine would get it, or
    None when there is nothing to build (no readable model or profile, or a plan that already fails)."""
    if not plan.facts or any(f.severity == "error" for f in plan.findings):
        return None
    served = plan.model_path if plan.view else plan.model_dir  # launch.vllm_argv's choice
    env = dict(plan.env)
    return {
        "kind": KIND,
        "path": served,
        "args": list(plan.args) + list(plan.user_args),
        "env": env,
        # The engine finds the plugin's entry point (and its sitecustomize runs) only when the
        # repairs put the plugin directory on PYTHONPATH.
        "register_plugin": PLUGIN_DIR in env.get("PYTHONPATH", "").split(os.pathsep),
    }


def apply(plan: Plan, ok: Optional[bool], reason: str, answer: Mapping[str, Any]) -> None:
    """The engine's answer as a finding of `plan` (none when it built the model)."""
    if answer.get("kind") != KIND:
        # No answer from the engine process (it died, or its time ran out): that says nothing of
        # the model, whatever the verification's own verdict on such a run.
        ok, reason = None, f"the engine process gave no answer ({reason})"
    if ok:
        say(f"{CODE}: {reason}")
    elif ok is False:
        plan.add_finding(CODE, "error", reason)
    else:
        plan.add_finding(CODE, "unverified", f"the engine's model class could not be built here: {reason}")


def warm_up(env: Mapping[str, str]) -> Optional[Warm]:
    """The engine process of a later `check`, started now to import vLLM and torch while the
    caller plans (None where MB is skipped)."""
    from ..start.verify import Warm

    return None if skipped(env) else Warm(env)


def check(plans: Sequence[Plan], env: Mapping[str, str], warm: Optional[Warm] = None) -> None:
    """Build the model of each plan that has one to build, all in one engine-Python process (the
    one `env`'s COMPAT_ENGINE_PYTHON names; `warm`'s, started by warm_up, when given), and add each
    answer to its plan."""
    if skipped(env):
        # A skipped proof is not a passed one: the verdict then promises the metadata layer only.
        for plan in plans:
            if request_for(plan) is not None:
                plan.add_finding(CODE, "unverified", "the engine's model class was not built: COMPAT_SKIP names MB")
        return
    todo = [(plan, request) for plan, request in ((p, request_for(p)) for p in plans) if request is not None]
    from ..start.verify import run_checks_of_many, verify_timeout

    timeout = IMPORT_TIMEOUT_S + verify_timeout(env) * len(todo)
    verdicts = run_checks_of_many([request for _, request in todo], env, timeout, warm)  # none: warm's process ended
    for (plan, _), verdict in zip(todo, verdicts, strict=True):
        apply(plan, verdict.ok, verdict.reason, verdict.result)
