"""Read-only, defensive access to the files of a mounted model directory.

Nothing here writes to the model directory or opens a weight file. Every read is bounded: a
submitted model may hold a Git-LFS pointer where a JSON file should be, a symlink out of the
directory, a 200 MB "config", files the container user may not read, JSON that would take
gigabytes to parse or nests a thousand levels deep, or strings that are not valid Unicode. Each
such case becomes a `Problem` the planner turns into a finding; none of them raises.
"""

from __future__ import annotations


import json
import os
import stat

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# Metadata JSON files are kilobytes; a tokenizer_config.json with an embedded vocabulary or a
# config.json with a large label map can reach a few MB. tokenizer.json is the one big metadata
# file a rule reads (R2 looks for ChatML markers): a 256k vocabulary with its merges is ~35 MB.
# Anything larger is not metadata and is not worth stalling container start for.
JSON_SIZE_CAP = 16 * 1024 * 1024
JSON_SIZE_CAPS = {"tokenizer.json": 64 * 1024 * 1024}
# Bytes are not memory: 16 MB of `[{},{},...]` become 5 million dicts (~700 MB). Before parsing,
# a file's cost is estimated from its bytes and its counts of containers and items, and a file
# over its cap is not parsed. A real tokenizer.json of a 256k vocabulary estimates ~150 MB.
JSON_MEMORY_CAP = 64 * 1024 * 1024
JSON_MEMORY_CAPS = {"tokenizer.json": 320 * 1024 * 1024}
CONTAINER_COST = 72  # an empty dict is 64 bytes, a list 56, plus the slot that holds it
ITEM_COST = 56  # a short str object (49+ bytes) and its slot
# Metadata nests a handful of levels; a value nested deeper is refused, so that nothing that
# walks or prints it later (JSON writers, repr in messages) can hit the recursion limit.
MAX_JSON_DEPTH = 64
# A Hugging Face hub cache repo (models--org--name): snapshots/REV/* link to blobs/SHA.
HUB_REPO_PREFIXES = ("models--",)
HUB_SNAPSHOTS = "snapshots"
HUB_BLOBS = "blobs"
# Git-LFS pointer files are ~130 bytes and start with this line.
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX = 1024


class Problem:
    """Why a file of the model could not be used as-is."""

    __slots__ = ("file", "reason")

    def __init__(self, file: str, reason: str) -> None:
        self.file, self.reason = file, reason

    def __repr__(self) -> str:
        return f"Problem({self.file!r}, {self.reason!r})"

    def message(self) -> str:
        return f"{self.file}: {self.reason}"


class FileState:
    """What a name in the model directory is, without reading its contents."""

    __slots__ = ("name", "exists", "usable", "size", "problem")

    def __init__(self, name: str, exists: bool, usable: bool, size: int = 0, problem: Optional[Problem] = None) -> None:
        self.name, self.exists, self.usable, self.size, self.problem = name, exists, usable, size, problem


def _decode(raw: bytes) -> str:
    """Text of a JSON file: UTF-8 with or without BOM, or UTF-16/32 when a BOM says so."""
    if raw.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return raw.decode("utf-32")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16")
    # The BOM stripped by hand: the utf-8-sig codec is one more module every start would import.
    return (raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw).decode("utf-8")


def memory_cost(raw: bytes) -> int:
    """What parsing `raw` may take, in bytes: an upper bound of its containers and items (brackets
    and commas inside strings count too) at the size of the smallest objects that hold them."""
    containers = raw.count(b"{") + raw.count(b"[")
    return len(raw) + CONTAINER_COST * containers + ITEM_COST * (raw.count(b",") + containers)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers in `value` nest more than `limit` levels (iteratively: no recursion)."""
    if not isinstance(value, (dict, list)):
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def _escape_lone_surrogates(value: Any) -> Tuple[Any, int]:
    """`value` with every lone surrogate in its strings (keys too) replaced by its `\\udXXX`
    text, and how many strings changed. Recursion is safe: the depth was bounded first."""
    count = 0

    def fix(text: str) -> str:
        nonlocal count
        if text.isascii():
            return text
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            count += 1
            return text.encode("utf-8", "backslashreplace").decode("utf-8")

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return fix(node)
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {fix(key): walk(item) for key, item in node.items()}
        return node

    fixed = walk(value)
    return fixed, count


def _hub_blobs(real: str) -> Optional[str]:
    """The `blobs` directory of a Hugging Face hub cache repo when `real` is one of its snapshots
    (`models--org--name/snapshots/REV`, each file a link to `../../blobs/SHA`), else None. Those
    links are the model's own files: a model run from a local hub cache must read as it serves."""
    snapshots = os.path.dirname(real)
    repo = os.path.dirname(snapshots)
    if os.path.basename(snapshots) != HUB_SNAPSHOTS or not os.path.basename(repo).startswith(HUB_REPO_PREFIXES):
        return None
    return os.path.join(repo, HUB_BLOBS)


class ModelDir:
    """Read-only facts of one model directory. Results are cached: each file is read once."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._real = os.path.realpath(self.path)
        self._blobs = _hub_blobs(self._real)
        self._json: Dict[str, Tuple[Any, Optional[Problem]]] = {}
        self._names: Optional[List[str]] = None
        self.problems: List[Problem] = []

    # -- directory level -------------------------------------------------------------------------
    def listing_problem(self) -> Optional[Problem]:
        """Why the directory itself cannot be used, or None."""
        if not os.path.exists(self.path):
            return Problem(".", f"model directory {self.path} does not exist")
        if not os.path.isdir(self.path):
            return Problem(".", f"{self.path} is not a directory")
        self.names()
        if self._names is None:
            return Problem(".", f"model directory {self.path} cannot be listed (permission denied?)")
        if not self._names:
            return Problem(".", f"model directory {self.path} is empty")
        return None

    def names(self) -> List[str]:
        """Top-level entry names, sorted; empty when the directory cannot be listed."""
        if self._names is None:
            try:
                with os.scandir(self.path) as entries:
                    self._names = sorted(e.name for e in entries)
            except OSError:
                self._names = None
                return []
        return list(self._names)

    # -- single files ----------------------------------------------------------------------------
    def state(self, name: str) -> FileState:
        """Whether `name` is a regular file inside the model directory that can be read."""
        full = os.path.join(self.path, name)
        try:
            lst = os.lstat(full)
        except FileNotFoundError:
            return FileState(name, exists=False, usable=False)
        except OSError as exc:
            return FileState(name, True, False, problem=Problem(name, f"cannot be inspected ({exc.strerror})"))
        if stat.S_ISLNK(lst.st_mode):
            target = os.path.realpath(full)
            inside = target == self._real or target.startswith(self._real + os.sep)
            inside = inside or (self._blobs is not None and target.startswith(self._blobs + os.sep))
            if not os.path.exists(target):
                return FileState(name, True, False, problem=Problem(name, "is a dangling symlink"))
            if not inside:
                return FileState(
                    name,
                    True,
                    False,
                    problem=Problem(name, "is a symlink that leaves the model directory; not followed"),
                )
        try:
            st = os.stat(full)
        except OSError as exc:
            return FileState(name, True, False, problem=Problem(name, f"cannot be inspected ({exc.strerror})"))
        if not stat.S_ISREG(st.st_mode):
            return FileState(name, True, False, problem=Problem(name, "is not a regular file"))
        if not os.access(full, os.R_OK):
            return FileState(name, True, False, st.st_size, Problem(name, "is not readable (permission denied)"))
        if st.st_size <= LFS_POINTER_MAX and self._is_lfs_pointer(full):
            return FileState(
                name,
                True,
                False,
                st.st_size,
                Problem(name, "is a Git-LFS pointer, not the file (run `git lfs pull` before submitting)"),
            )
        return FileState(name, True, True, st.st_size)

    def has(self, name: str) -> bool:
        """True when `name` is a usable regular file."""
        return self.state(name).usable

    @staticmethod
    def _is_lfs_pointer(full: str) -> bool:
        try:
            with open(full, "rb") as fh:
                return fh.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX
        except OSError:
            return False

    def read_json(self, name: str) -> Tuple[Any, Optional[Problem]]:
        """Parsed JSON of `name`, or (None, problem); (value, problem) when it is usable with a
        caveat the plan reports. A missing file is (None, None)."""
        if name not in self._json:
            self._json[name] = self._load_json(name)
            problem = self._json[name][1]
            if problem is not None:
                self.problems.append(problem)
        return self._json[name]

    def json_object(self, name: str) -> Dict[str, Any]:
        """`name` as a dict; {} when missing or unusable (the problem is recorded once)."""
        value, problem = self.read_json(name)
        if problem is None and value is not None and not isinstance(value, dict):
            problem = Problem(name, f"holds a JSON {type(value).__name__}, not an object; ignored")
            self._json[name] = (None, problem)
            self.problems.append(problem)
            return {}
        return value if isinstance(value, dict) else {}

    def _load_json(self, name: str) -> Tuple[Any, Optional[Problem]]:
        """(value, None), (None, None) when missing, (None, problem) when unusable, or (value,
        problem) when usable with a caveat (text that is not valid Unicode, carried escaped)."""
        st = self.state(name)
        if not st.exists:
            return None, None
        if not st.usable:
            return None, st.problem
        size_cap = JSON_SIZE_CAPS.get(name, JSON_SIZE_CAP)
        if st.size > size_cap:
            return None, Problem(
                name, f"is {st.size // (1024 * 1024)} MiB, over the {size_cap // (1024 * 1024)} MiB cap for metadata; not read"
            )
        try:
            with open(os.path.join(self.path, name), "rb") as fh:
                raw = fh.read(size_cap + 1)
        except OSError as exc:
            return None, Problem(name, f"cannot be read ({exc.strerror})")
        memory_cap = JSON_MEMORY_CAPS.get(name, JSON_MEMORY_CAP)
        cost = memory_cost(raw)
        if cost > memory_cap:
            return None, Problem(
                name,
                f"would take ~{cost // (1024 * 1024)} MiB of memory to parse (its containers and items), "
                f"over the {memory_cap // (1024 * 1024)} MiB cap for metadata; not read",
            )
        try:
            text = _decode(raw)
        except UnicodeDecodeError as exc:
            return None, Problem(name, f"is not valid UTF-8 (byte {exc.start}); not read")
        del raw
        try:
            value = json.loads(text)
        except RecursionError:
            return None, Problem(name, "nests deeper than Python can parse; not read")
        except ValueError as exc:
            return None, Problem(name, f"is not valid JSON ({exc}); ignored")
        if _deeper_than(value, MAX_JSON_DEPTH):
            return None, Problem(name, f"nests deeper than {MAX_JSON_DEPTH} levels, which no metadata does; not read")
        if "\\ud" in text or "\\uD" in text:  # only a \\uXXXX escape can make a lone surrogate
            value, escaped = _escape_lone_surrogates(value)
            if escaped:
                return value, Problem(
                    name,
                    f"holds {escaped} string(s) with lone UTF-16 surrogates (not valid Unicode); "
                    "carried with each as its \\uXXXX text, and the file is not rewritten",
                )
        return value, None

    def read_text(self, name: str, cap: int = 1024 * 1024) -> Tuple[Optional[str], Optional[Problem]]:
        """A small text file (a chat template), or (None, problem)."""
        st = self.state(name)
        if not st.exists:
            return None, None
        if not st.usable:
            return None, st.problem
        if st.size > cap:
            return None, Problem(name, f"is over {cap} bytes; not read")
        try:
            with open(os.path.join(self.path, name), "rb") as fh:
                return _decode(fh.read(cap)), None
        except (OSError, UnicodeDecodeError) as exc:
            return None, Problem(name, f"cannot be read as text ({exc})")
