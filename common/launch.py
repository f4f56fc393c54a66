"""`launch`: run the preflight, then replace this process with `vllm serve`.

Nothing here may stop vLLM from starting: a crash, a timeout or a missing tool in the preflight
ends in the exec with the user's arguments and whatever repairs were complete.
"""

from __future__ import annotations


import os
import signal
import sys

from .log import say
from .plan import Plan
from .preflight import build_plan
from .profile import image_card

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Mapping, NoReturn, Optional

DEFAULT_TIMEOUT_S = 120


class PreflightTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise PreflightTimeout()


def _timeout(env: Mapping[str, str]) -> int:
    try:
        return max(1, int(float(env.get("COMPAT_TIMEOUT", DEFAULT_TIMEOUT_S))))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def vllm_argv(model_dir: str, plan: Optional[Plan], user_args: List[str]) -> List[str]:
    """`vllm serve MODEL <repair args> <user args>`: an argv list, never a shell string."""
    if plan is None:
        return ["vllm", "serve", model_dir] + list(user_args)
    served = plan.model_path if plan.view else model_dir  # a model view stands in for the model
    return ["vllm", "serve", served] + plan.args + plan.user_args


def launch(user_args: List[str], env: Mapping[str, str]) -> NoReturn:
    model_dir = env.get("MODEL_DIR") or "/model"
    card = env.get("COMPAT_CARD") or image_card() or ""
    plan: Optional[Plan] = None
    exec_env = dict(env)
    if env.get("COMPAT_DISABLE") == "1":
        say("COMPAT_DISABLE=1: starting vLLM untouched")
    else:
        plan = Plan(card=card, model_dir=os.path.abspath(model_dir))
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(_timeout(env))
        try:
            build_plan(model_dir, card, user_args, env, plan=plan, patch_engine=True)
        except PreflightTimeout:
            say(f"preflight ran past COMPAT_TIMEOUT={_timeout(env)}s; starting vLLM with the repairs completed so far")
        except BaseException as exc:  # noqa: B902 - red line: nothing blocks the start
            say(f"preflight failed ({type(exc).__name__}: {exc}); starting vLLM with the repairs completed so far")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        if not plan.user_args:
            plan.user_args = list(user_args)
        exec_env.update(plan.env)
    argv = vllm_argv(model_dir, plan, user_args)
    vllm = env.get("COMPAT_VLLM") or "vllm"
    say("exec " + " ".join(argv))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvpe(vllm, [vllm] + argv[1:], exec_env)
    except OSError as exc:
        say(f"cannot exec {vllm}: {exc.strerror}")
        sys.exit(127)
