"""`launch`: run the preflight, then replace this process with `vllm serve`.

Nothing here may stop vLLM from starting: a crash, a timeout or a missing tool in the preflight
ends in the exec with the user's arguments and whatever repairs were complete.

- COMPAT_TIMEOUT (seconds, default 120; anything but a number in (0, 86400] means the default)
  bounds the whole preflight, a verification subprocess included: the timer raises a
  BaseException no rule's `except Exception` can swallow, and subprocess.run kills its child when
  it passes through. The repairs verified by then are still applied.
- vLLM gets exactly the environment this process was started with (read back from
  /proc/self/environ, so Python's own locale coercion, PEP 538, never reaches it) plus the
  repairs' variables.
- Ctrl-C (SIGINT) during the preflight stops the start: exit 130 and vLLM is not started, as
  Ctrl-C would have stopped vLLM itself. It is the one way out without the exec.
- A closed stdout or stderr costs the log lines, never the start.
"""

from __future__ import annotations


import os
import sys

try:
    # The C module `signal` wraps: already loaded at interpreter start, with the same functions
    # and constants; `signal` itself builds enums of every signal, half a millisecond per start.
    import _signal as signal
except ImportError:  # an interpreter without it (not CPython)
    import signal  # type: ignore[no-redef]

from .log import say
from ..plan import Plan
from .preflight import build_plan
from ..engine.profile import image_card
from .settings import seconds
from ..engine.vllm_args import _flag_name

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Mapping, NoReturn, Optional

DEFAULT_TIMEOUT_S = 120.0
# Reading the start environment and joining the repairs an interrupted preflight completed take
# microseconds; a limit anyway, since nothing may hang the start.
SALVAGE_S = 5.0
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
# What Python's locale coercion (PEP 538) writes into LC_CTYPE, in the order it tries them.
COERCION_TARGETS = ("C.UTF-8", "C.utf8", "UTF-8")


class PreflightTimeout(BaseException):
    """COMPAT_TIMEOUT ran out. A BaseException, so no `except Exception` in a rule or a helper
    can swallow it and let the preflight run on with no deadline left."""


class _Deadline:
    armed = False  # a timer signal that arrives after the preflight is over is ignored


def _on_alarm(signum: int, frame: object) -> None:
    if _Deadline.armed:
        _Deadline.armed = False
        raise PreflightTimeout()


def vllm_argv(model_dir: str, plan: Optional[Plan], user_args: List[str]) -> List[str]:
    """`vllm serve MODEL <repair args> <user args>`: an argv list, never a shell string."""
    if plan is None:
        return ["vllm", "serve", model_dir] + list(user_args)
    served = plan.model_path if plan.view else model_dir  # a model view stands in for the model
    return ["vllm", "serve", served] + plan.args + plan.user_args


def original_environ() -> Dict[str, str]:
    """The environment this process was exec'd with. os.environ is not it: when no locale is set,
    Python's start-up sets LC_CTYPE=C.UTF-8 there (PEP 538), and vLLM must not inherit that."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return _uncoerced(dict(os.environ))
    env: Dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env.setdefault(os.fsdecode(key), os.fsdecode(value))  # the first wins, as in getenv
    return env


def _uncoerced(env: Dict[str, str]) -> Dict[str, str]:
    """Without /proc: drop the LC_CTYPE that coercion would have written. Coercion happened only
    if the start-up locale was C (then UTF-8 mode is on too); if LC_CTYPE was really given with
    that value, vLLM's own Python coerces to the same value again."""
    if (
        sys.flags.utf8_mode
        and not env.get("LC_ALL")
        and env.get("LANG", "C") in ("", "C", "POSIX")
        and env.get("LC_CTYPE") in COERCION_TARGETS
    ):
        del env["LC_CTYPE"]
    return env


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: the fd was closed when Python started
            try:
                stream.flush()
            except (OSError, ValueError):
                pass


def _arm(timeout: float) -> bool:
    try:
        signal.signal(signal.SIGALRM, _on_alarm)
        _Deadline.armed = True
        signal.setitimer(signal.ITIMER_REAL, timeout)  # float seconds: 0.5 stays half a second
        return True
    except (ValueError, OSError, AttributeError) as exc:  # no SIGALRM here, or not the main thread
        _Deadline.armed = False
        say(f"COMPAT_TIMEOUT cannot be armed ({exc}); the preflight runs without a time limit")
        return False


def _disarm() -> None:
    _Deadline.armed = False
    try:
        signal.setitimer(signal.ITIMER_REAL, 0)
    except (ValueError, OSError, AttributeError):
        pass


def _bounded(work: Callable[[], object], limit: float, what: str, limit_name: str = "") -> bool:
    """Run `work` within `limit` seconds; True when it finished. Any exception, SystemExit and
    the timer included, is said and swallowed; only Ctrl-C goes through."""
    try:
        try:
            _arm(limit)
            work()
            return True
        finally:
            _disarm()
    except KeyboardInterrupt:
        raise
    except PreflightTimeout:
        say(f"{what} ran past {limit_name}{limit:g}s")
    except BaseException as exc:  # noqa: B902 - red line: nothing blocks the start
        say(f"{what} failed ({type(exc).__name__}: {exc})")
    return False


def _preflight(plan: Plan, model_dir: str, card: str, user_args: List[str], env: Mapping[str, str]) -> None:
    """Fill `plan` within COMPAT_TIMEOUT; interrupted, keep the repairs complete by then."""
    timeout = seconds(env, "COMPAT_TIMEOUT", DEFAULT_TIMEOUT_S)
    if _bounded(lambda: build_plan(model_dir, card, user_args, env, plan=plan, patch_engine=True), timeout, "preflight", "COMPAT_TIMEOUT="):
        return
    say("starting vLLM with the repairs completed so far")
    _stop_children()
    if not _bounded(lambda: _salvage(plan, user_args, env), SALVAGE_S, "joining the repairs completed so far"):
        plan.args, plan.env, plan.user_args = [], {}, list(user_args)
        say("starting vLLM without repairs")


def _salvage(plan: Plan, user_args: List[str], env: Mapping[str, str]) -> None:
    """Join the repairs verified before the interruption (R5's overrides survive a hung tokenizer
    check): what build_plan's last steps do, from the repairs alone."""
    from .preflight import _assemble
    from ..engine.vllm_args import UserArgs

    plan.args, plan.env, plan.user_args = [], {}, list(user_args)
    _assemble(plan, UserArgs(user_args), env)


def _stop_children() -> None:
    """Kill what an interrupted preflight left running (a verification child the timer cut short,
    and its own children), so that vLLM starts alone and with the whole machine."""
    parents: Dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                data = fh.read()
            parents[int(entry)] = int(data[data.rindex(b")") + 2 :].split()[1])  # after "pid (comm) state"
        except (OSError, ValueError, IndexError):
            continue
    me = os.getpid()
    doomed, frontier = [], [me]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        doomed += children
        frontier += children
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in doomed:
        if parents.get(pid) == me:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


def _say_noexec(env: Mapping[str, str]) -> None:
    """Say so when HOME (the images set HOME=/tmp) or the temp dir is on a noexec mount: the
    engine compiles its just-in-time kernels (Triton, torch inductor) into caches there and loads
    them as shared objects, which such a mount refuses, and it then fails far from the cause
    (triage's NOEXEC). The preflight itself needs no exec there. One statvfs per directory."""
    seen = set()
    for directory in (env.get("HOME"), env.get("TMPDIR") or "/tmp"):
        if not directory or directory in seen:
            continue
        seen.add(directory)
        try:
            noexec = os.statvfs(directory).f_flag & os.ST_NOEXEC
        except (OSError, AttributeError, ValueError):  # gone, or no ST_NOEXEC on this system
            continue
        if noexec:
            say(
                f"{directory} is on a noexec mount: the engine's compiled kernels cached there cannot be loaded "
                "(NOEXEC); give the container an executable /tmp (docker run --tmpfs /tmp:exec)"
            )


def keeps_red_lines(plan: Plan, user_args: List[str]) -> bool:
    """The last guard of red lines 4 and 5: strings only, and the user's arguments passed whole,
    in order, last; only the value of their own --hf-overrides may differ (ours merged in)."""
    if not all(isinstance(a, str) for a in plan.args + plan.user_args):
        return False
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in plan.env.items()):
        return False
    if len(plan.user_args) != len(user_args):
        return False
    for i, (before, after) in enumerate(zip(user_args, plan.user_args, strict=True)):
        if before == after:
            continue
        inline = "=" in before and _flag_name(before) == "--hf-overrides" and _flag_name(after) == "--hf-overrides"
        if not (inline or (i > 0 and _flag_name(user_args[i - 1]) == "--hf-overrides" and "=" not in user_args[i - 1])):
            return False
    return True


def launch(user_args: List[str], env: Mapping[str, str]) -> NoReturn:
    try:
        _launch(list(user_args), env)
    except KeyboardInterrupt:
        say("interrupted (Ctrl-C) before vLLM started: the start is stopped, vLLM is not started")
        _flush()
        sys.exit(INTERRUPTED_EXIT)


def _planned(model_dir: str, user_args: List[str], env: Mapping[str, str]) -> Optional[Plan]:
    """The preflight's plan, or None when even its outline fails (vLLM then starts untouched)."""
    try:
        card = env.get("COMPAT_CARD") or image_card() or ""
        plan = Plan(card=card, model_dir=os.path.abspath(model_dir))
    except Exception as exc:  # noqa: B902 - e.g. the working directory was removed
        say(f"preflight could not start ({type(exc).__name__}: {exc}); starting vLLM without repairs")
        return None
    _preflight(plan, model_dir, card, user_args, env)
    try:
        if keeps_red_lines(plan, user_args):
            return plan
    except Exception:  # noqa: B902 - a plan that cannot even be checked is not used
        pass
    say("the repairs do not join the arguments cleanly; starting vLLM without them")
    return None


def _launch(user_args: List[str], env: Mapping[str, str]) -> NoReturn:
    model_dir = env.get("MODEL_DIR") or "/model"
    given_env: Dict[str, str] = {}
    if not _bounded(
        lambda: given_env.update(original_environ() if env is os.environ else dict(env)),
        SALVAGE_S,
        "reading the environment the container started with",
    ):
        given_env = _uncoerced(dict(env))  # the next best: Python's copy, less its coercion
    exec_env = dict(given_env)
    plan: Optional[Plan] = None
    if env.get("COMPAT_DISABLE") == "1":
        say("COMPAT_DISABLE=1: starting vLLM untouched")
    else:
        _say_noexec(env)
        plan = _planned(model_dir, user_args, env)
        if plan is not None:
            exec_env.update(plan.env)
    argv = vllm_argv(model_dir, plan, user_args)
    vllm = env.get("COMPAT_VLLM") or "vllm"
    say("exec " + " ".join(argv))
    _flush()
    try:
        os.execvpe(vllm, [vllm] + argv[1:], exec_env)
    except OSError as exc:
        say(f"cannot exec {vllm}: {exc.strerror}")
        _flush()
        sys.exit(127)
    except (ValueError, TypeError) as exc:  # an argument or variable exec cannot carry (a NUL byte)
        say(f"exec refused the repaired command ({exc}); starting vLLM without repairs")
    argv = vllm_argv(model_dir, None, user_args)
    try:
        os.execvpe(vllm, [vllm] + argv[1:], given_env)
    except (OSError, ValueError) as exc:
        say(f"cannot exec {vllm}: {getattr(exc, 'strerror', None) or exc}")
        _flush()
        sys.exit(127)
