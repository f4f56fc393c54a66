"""The user's (platform's) vLLM arguments, and how repair arguments join them.

The user's arguments always win: a flag they give is never added again, and an `--hf-overrides`
of theirs absorbs ours with their keys taking precedence. vLLM accepts `--flag value`,
`--flag=value` and underscores for dashes; all three spellings count as given.
"""

from __future__ import annotations


import json

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple


def _flag_name(arg: str) -> Optional[str]:
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0].replace("_", "-")


class UserArgs:
    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)

    def has(self, flag: str) -> bool:
        return any(_flag_name(a) == flag for a in self.args)

    def value(self, flag: str) -> Optional[str]:
        """The last value given for `flag` (vLLM's argparse keeps the last), or None."""
        found = None
        for i, arg in enumerate(self.args):
            if _flag_name(arg) != flag:
                continue
            if "=" in arg:
                found = arg.split("=", 1)[1]
            elif i + 1 < len(self.args):
                found = self.args[i + 1]
        return found

    def _value_position(self, flag: str) -> Optional[Tuple[int, bool]]:
        position = None
        for i, arg in enumerate(self.args):
            if _flag_name(arg) == flag:
                position = (i, "=" in arg) if ("=" in arg or i + 1 < len(self.args)) else None
        return position

    def with_value(self, flag: str, value: str) -> List[str]:
        """A copy of the arguments with the last value of `flag` replaced."""
        out = list(self.args)
        position = self._value_position(flag)
        if position is None:
            return out
        i, inline = position
        if inline:
            out[i] = out[i].split("=", 1)[0] + "=" + value
        else:
            out[i + 1] = value
        return out


def deep_merge(ours: Dict[str, Any], theirs: Dict[str, Any]) -> Dict[str, Any]:
    """`theirs` laid over `ours`: nested dicts merge, any other value of theirs wins."""
    merged = dict(ours)
    for key, value in theirs.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def join_args(repair_args: List[str], hf_overrides: Dict[str, Any], user: UserArgs) -> Tuple[List[str], List[str], Optional[str]]:
    """(repair args to insert, user args possibly with merged --hf-overrides, problem or None).

    Repair flags the user already gives are dropped here, as a last guard for every rule.
    """
    problem = None
    ours: List[str] = []
    i = 0
    while i < len(repair_args):
        flag = _flag_name(repair_args[i])
        takes_value = flag is not None and "=" not in repair_args[i] and i + 1 < len(repair_args) and not repair_args[i + 1].startswith("--")
        chunk = repair_args[i:i + 2] if takes_value else repair_args[i:i + 1]
        if flag is None or not user.has(flag):
            ours.extend(chunk)
        i += len(chunk)
    user_args = list(user.args)
    if hf_overrides:
        given = user.value("--hf-overrides")
        if given is None and user.has("--hf-overrides"):
            problem = "--hf-overrides is given without a value; repair overrides not added"
        elif given is None:
            ours += ["--hf-overrides", json.dumps(hf_overrides, sort_keys=True)]
        else:
            try:
                theirs = json.loads(given)
            except ValueError:
                theirs = None
            if isinstance(theirs, dict):
                user_args = user.with_value("--hf-overrides", json.dumps(deep_merge(hf_overrides, theirs), sort_keys=True))
            else:
                problem = "the given --hf-overrides is not a JSON object; repair overrides not merged"
    return ours, user_args, problem
