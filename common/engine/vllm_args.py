"""The user's (platform's) vLLM arguments, and how repair arguments join them.

The user's arguments always win: a flag they give is never added again, and an `--hf-overrides`
of theirs absorbs ours with their keys taking precedence. vLLM accepts `--flag value`,
`--flag=value` and underscores for dashes; all three spellings count as given.

A `--config FILE.yaml` of theirs counts as their flags too. vLLM (0.6.2 and later, e.g. 0.11)
expands it in FlexibleArgumentParser._pull_args_from_config: only the exact token `--config`,
at most once, a .yaml/.yml path, `yaml.safe_load` of a mapping, each key becoming `--KEY`
followed by `str(value)` (true: the bare flag; false and empty lists: nothing; a list: its items),
inserted right after `serve MODEL`, so every command-line flag (ours included) beats the file.
The file is read the same way here: PyYAML when the Python has it (vLLM requires it, so the
image's Python does), imported only when `--config` is given; elsewhere a small reader of the
flat `key: value` files vLLM documents, whose unreadable values make us stand back.
"""

from __future__ import annotations


import json
import os
import re
import stat

from ..model.json_numbers import positive_number

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple

CONFIG_FLAG = "--config"
CONFIG_SIZE_CAP = 1024 * 1024
# Nodes a config value may have before it is turned into text (YAML aliases can make a few
# lines describe a value whose text would fill the memory).
CONFIG_VALUE_NODES = 10000
# A value the small reader cannot read (a nested block or a flow collection): the flag counts as
# given, its value is not a JSON object, so no repair is merged into it.
UNREADABLE = "<value not readable without PyYAML>"
HF_OVERRIDES = "--hf-overrides"


def flag_name(arg: str) -> Optional[str]:
    """`--max_model_len=5` -> `--max-model-len`; `--hf-overrides.rope_theta` -> `--hf-overrides`
    (vLLM collects such dotted keys into the flag's JSON); None for a value."""
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")


_flag_name = flag_name  # the name other modules used


def _dotted(arg: str) -> bool:
    return arg.startswith("--") and "." in arg.split("=", 1)[0]


class UserArgs:
    """The platform's arguments (`args`, as given) and those its `--config` file adds
    (`config_args`, which vLLM places before the command line). `read_config=False` for an
    engine whose `vllm serve` has no `--config` (it then refuses the flag itself)."""

    def __init__(self, args: Sequence[str], read_config: bool = True) -> None:
        self.args = list(args)
        self.config_args: List[str] = []
        self.config_problem: Optional[str] = None
        if read_config and CONFIG_FLAG in self.args:
            self.config_args, self.config_problem = config_file_args(self.args)

    def _effective(self) -> List[str]:
        return self.config_args + self.args

    def has(self, flag: str) -> bool:
        return any(flag_name(a) == flag for a in self._effective())

    def value(self, flag: str) -> Optional[str]:
        """The last value given for `flag` (vLLM's argparse keeps the last), or None."""
        return _last_value(self._effective(), flag)

    def dotted(self, flag: str) -> bool:
        """Whether `flag` is given key by key (`--hf-overrides.rope_theta 5`)."""
        return any(flag_name(a) == flag and _dotted(a) for a in self._effective())

    def _value_position(self, flag: str) -> Optional[Tuple[int, bool]]:
        position = None
        for i, arg in enumerate(self.args):
            if flag_name(arg) == flag and not _dotted(arg):
                position = (i, "=" in arg) if ("=" in arg or i + 1 < len(self.args)) else None
        return position

    def with_value(self, flag: str, value: str) -> List[str]:
        """A copy of the command-line arguments with the last value of `flag` replaced."""
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


def _last_value(args: List[str], flag: str) -> Optional[str]:
    found = None
    for i, arg in enumerate(args):
        if flag_name(arg) != flag or _dotted(arg):
            continue
        if "=" in arg:
            found = arg.split("=", 1)[1]
        elif i + 1 < len(args):
            found = args[i + 1]
    return found


def _given(args: List[str], flag: str) -> bool:
    return any(flag_name(a) == flag and not _dotted(a) for a in args)


# -- the --config file, read as vLLM reads it --------------------------------------------------


def config_file_args(args: List[str]) -> Tuple[List[str], Optional[str]]:
    """The arguments vLLM pulls from `--config FILE` in `args`, in its order, or ([], why not).
    Never raises: a file vLLM itself cannot read makes vLLM refuse to start anyway."""
    try:
        return _config_file_args(args)
    except Exception as exc:  # noqa: B902 - a bad config file must never cost the plan
        return [], f"--config could not be read here ({type(exc).__name__}: {exc})"


def _config_file_args(args: List[str]) -> Tuple[List[str], Optional[str]]:
    if args.count(CONFIG_FLAG) > 1:
        return [], "--config is given more than once (vLLM refuses that); its files are not read here"
    index = args.index(CONFIG_FLAG)
    if index == len(args) - 1:
        return [], "--config is given without a file (vLLM refuses that)"
    path = args[index + 1]
    if path.split(".")[-1] not in ("yaml", "yml"):
        return [], f"--config {path} is not a .yaml/.yml file (vLLM refuses that)"
    try:
        st = os.stat(path)
    except OSError as exc:
        return [], f"--config {path} cannot be read ({exc.strerror}); vLLM will fail to read it too"
    if not stat.S_ISREG(st.st_mode):
        return [], f"--config {path} is not a regular file; not read here"
    if st.st_size > CONFIG_SIZE_CAP:
        return [], f"--config {path} is over {CONFIG_SIZE_CAP} bytes; not read here"
    with open(path, "rb") as fh:
        text = fh.read(CONFIG_SIZE_CAP + 1).decode("utf-8")
    data = _load_yaml(text)
    if not isinstance(data, dict):
        return [], f"--config {path} holds no mapping of flags (vLLM refuses that)"
    out: List[str] = []
    for key, value in data.items():
        if not isinstance(key, str):
            return [], f"--config {path} has a key {key!r} that is not text (vLLM refuses that)"
        if isinstance(value, bool):
            if value:
                out.append("--" + key)
        elif isinstance(value, list):
            if value:
                out.append("--" + key)
                out.extend(_text(item) for item in value)
        else:
            out += ["--" + key, _text(value)]
    return out, None


def _text(value: Any) -> str:
    """str(value), as vLLM turns a config value into an argument, for values of bounded size."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        nodes, stack = 0, [value]
        while stack:
            node = stack.pop()
            nodes += 1
            if nodes > CONFIG_VALUE_NODES:
                raise ValueError(f"a value has over {CONFIG_VALUE_NODES} parts")
            if isinstance(node, dict):
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return str(value)


def _load_yaml(text: str) -> Any:
    try:
        import yaml  # vLLM's own requirement: present wherever vLLM reads --config
    except ImportError:
        return _flat_yaml(text)
    return yaml.safe_load(text)


# PyYAML's (YAML 1.1) implicit scalars, the forms a flat flags file uses.
_BOOL = {
    **{w: True for w in ("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")},
    **{w: False for w in ("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")},
}
_NULL = ("", "~", "null", "Null", "NULL")
_INT = r"[-+]?(?:0|[1-9][0-9_]*)\Z"  # patterns, compiled (by re's cache) only when the small reader runs
_FLOAT = r"[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+][0-9]+)?\Z"


def _flat_yaml(text: str) -> Optional[Dict[str, Any]]:
    """The `key: value` lines of a flat YAML mapping (None for an empty file, as PyYAML); a nested
    block or a flow collection is UNREADABLE (the key still counts as given)."""
    result: Optional[Dict[str, Any]] = None
    last: Optional[str] = None
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or line in ("---", "..."):
            continue
        if line[0] in " \t-":
            if last is not None:
                result[last] = UNREADABLE
            continue
        key, sep, rest = line.partition(":")
        if not sep:
            raise ValueError(f"{raw[:80]!r} is not a `key: value` line")
        last = _scalar(key.strip())
        if not isinstance(last, str):
            raise ValueError(f"key {key.strip()!r} is not text")
        result = result if result is not None else {}
        result[last] = _scalar(rest.strip())
    return result


def _scalar(token: str) -> Any:
    if token[:1] == "'":
        end = token.find("'", 1)
        while end != -1 and token[end + 1 : end + 2] == "'":
            end = token.find("'", end + 2)
        return token[1:end].replace("''", "'") if end != -1 else UNREADABLE
    if token[:1] == '"':
        match = re.match(r'"(?:[^"\\]|\\.)*"', token)
        try:
            return json.loads(match.group(0)) if match else UNREADABLE
        except ValueError:
            return UNREADABLE
    token = re.split(r"\s#", token, maxsplit=1)[0].strip()
    inner = token[1:-1]
    if token[:1] == "[" and token[-1:] == "]" and not any(c in inner for c in "[]{}'\"&*!|>#"):
        return [_scalar(item.strip()) for item in inner.split(",")] if inner.strip() else []
    if token[:1] in ("[", "{", "&", "*", "!", "|", ">"):
        return UNREADABLE
    if token in _BOOL:
        return _BOOL[token]
    if token in _NULL:
        return None
    if re.match(_INT, token):
        return int(token.replace("_", ""))
    if re.match(_FLOAT, token) and token not in (".", "-.", "+."):
        return float(token.replace("_", ""))
    return token


# -- joining ------------------------------------------------------------------------------------


def deep_merge(ours: Dict[str, Any], theirs: Dict[str, Any]) -> Dict[str, Any]:
    """`theirs` laid over `ours`: nested dicts merge, any other value of theirs wins."""
    merged = dict(ours)
    for key, value in theirs.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _merged(ours: Dict[str, Any], given: str) -> Optional[str]:
    """Our overrides under their JSON object `given` (vLLM parses a value that looks like
    `{...}` as JSON), or None when theirs is no JSON object."""
    if not re.match(r"(?s)^\s*{.*}\s*$", given):
        return None
    try:
        theirs = json.loads(given)
        return json.dumps(deep_merge(ours, theirs), sort_keys=True) if isinstance(theirs, dict) else None
    except (ValueError, RecursionError):
        return None


def join_args(repair_args: List[str], hf_overrides: Dict[str, Any], user: UserArgs) -> Tuple[List[str], List[str], Optional[str]]:
    """(repair args to insert, user args possibly with merged --hf-overrides, problem or None).

    Repair flags the user already gives (on the command line or in their --config file) are
    dropped here, as a last guard for every rule.
    """
    problems: List[str] = [user.config_problem] if user.config_problem else []
    ours: List[str] = []
    i = 0
    while i < len(repair_args):
        flag = flag_name(repair_args[i])
        takes_value = (
            flag is not None and "=" not in repair_args[i] and i + 1 < len(repair_args) and not repair_args[i + 1].startswith("--")
        )
        chunk = repair_args[i : i + 2] if takes_value else repair_args[i : i + 1]
        if flag is None or not user.has(flag):
            ours.extend(chunk)
        i += len(chunk)
    user_args = list(user.args)
    if hf_overrides:
        if user.dotted(HF_OVERRIDES):
            problems.append(
                "--hf-overrides is given key by key (--hf-overrides.KEY), which vLLM applies over any "
                "whole value; repair overrides not added"
            )
        elif _given(user.args, HF_OVERRIDES):
            given = _last_value(user.args, HF_OVERRIDES)
            merged = None if given is None else _merged(hf_overrides, given)
            if given is None:
                problems.append("--hf-overrides is given without a value; repair overrides not added")
            elif merged is None:
                problems.append("the given --hf-overrides is not a JSON object; repair overrides not merged")
            else:
                user_args = user.with_value(HF_OVERRIDES, merged)
        elif _given(user.config_args, HF_OVERRIDES):
            given = _last_value(user.config_args, HF_OVERRIDES)
            merged = None if given is None else _merged(hf_overrides, given)
            if merged is None:
                problems.append("the --hf-overrides of the --config file is not a JSON object; repair overrides not merged")
            else:  # theirs with ours under it, on the command line, where it beats the file's
                ours += [HF_OVERRIDES, merged]
        else:
            try:
                ours += [HF_OVERRIDES, json.dumps(hf_overrides, sort_keys=True)]
            except (ValueError, TypeError, RecursionError) as exc:
                problems.append(f"repair overrides could not be written as JSON ({type(exc).__name__})")
    return ours, user_args, "; ".join(problems) or None


# Flags read one by one (doctor's memory check, R10, the conformance cells' sizes), with the short
# forms vLLM also takes.
SHORT_FLAGS = {"--tensor-parallel-size": "-tp", "--pipeline-parallel-size": "-pp"}


def positive(text: Optional[str], kind: type = float) -> Optional[Any]:
    """`text` (an argument's value) as a finite positive number of `kind`; None when it is not
    one ("0", "nan" and "inf" are not)."""
    try:
        value = kind(text) if text is not None else None
    except ValueError:
        return None
    return value if positive_number(value) is not None else None


def int_arg(user: UserArgs, flag: str) -> Optional[int]:
    """The flag's value as a positive integer (its short form too); None when not given or not one."""
    text = user.value(flag)
    short = SHORT_FLAGS.get(flag)
    if short is not None:
        args = user.config_args + user.args
        for i, arg in enumerate(args):
            if arg == short and i + 1 < len(args):
                text = args[i + 1]
            elif arg.startswith(short + "="):
                text = arg.split("=", 1)[1]
    return positive(text, int)


def switch_arg(user: UserArgs, flag: str) -> Optional[bool]:
    """A boolean flag: True or False as given (`--no-FLAG`, `--FLAG false`), None when not given."""
    if user.has("--no-" + flag[2:]):
        return False
    if not user.has(flag):
        return None
    value = (user.value(flag) or "").lower()
    return value not in ("false", "0", "no")
