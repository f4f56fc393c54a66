"""Read-only, defensive access to the files of a mounted model directory.

Nothing here writes to the model directory or opens a weight file. Every read is bounded: a
submitted model may hold a Git-LFS pointer where a JSON file should be, a symlink out of the
directory, a 200 MB "config", or files the container user may not read. Each such case becomes a
`Problem` the planner turns into a finding; none of them raises.
"""

from __future__ import annotations


import json
import os
import stat

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# Metadata JSON files are kilobytes; a tokenizer_config.json with an embedded vocabulary can reach
# a few MB. Anything larger is not metadata and is not worth stalling container start for.
JSON_SIZE_CAP = 16 * 1024 * 1024
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
    return raw.decode("utf-8-sig")


class ModelDir:
    """Read-only facts of one model directory. Results are cached: each file is read once."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._real = os.path.realpath(self.path)
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
            if not os.path.exists(target):
                return FileState(name, True, False, problem=Problem(name, "is a dangling symlink"))
            if not inside:
                return FileState(
                    name, True, False,
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
                name, True, False, st.st_size,
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
        """Parsed JSON of `name`, or (None, problem). A missing file is (None, None)."""
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
        st = self.state(name)
        if not st.exists:
            return None, None
        if not st.usable:
            return None, st.problem
        if st.size > JSON_SIZE_CAP:
            return None, Problem(name, f"is {st.size // (1024 * 1024)} MiB, over the {JSON_SIZE_CAP // (1024 * 1024)} MiB cap for metadata; not read")
        try:
            with open(os.path.join(self.path, name), "rb") as fh:
                raw = fh.read(JSON_SIZE_CAP + 1)
        except OSError as exc:
            return None, Problem(name, f"cannot be read ({exc.strerror})")
        try:
            text = _decode(raw)
        except UnicodeDecodeError as exc:
            return None, Problem(name, f"is not valid UTF-8 (byte {exc.start}); not read")
        try:
            return json.loads(text), None
        except ValueError as exc:
            return None, Problem(name, f"is not valid JSON ({exc}); ignored")

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
