"""The tensor names and shapes of a model's safetensors weights, read from metadata only.

A safetensors file starts with an 8-byte little-endian header length, then that many bytes of
JSON ({name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}), then the weight bytes.
Only the length and the header are read, unbuffered (a buffered read would pull in kilobytes of
weights with them), and the header is capped: safetensors itself refuses headers over 100 MB and a
shard of a large MoE (tens of thousands of tensors) has a few MB. Every file goes through
ModelDir.state first, so a Git-LFS pointer, a symlink out of the model, a dangling symlink or an
unreadable file becomes a Problem, as does a truncated file or a header that is not a JSON object
of tensors. Nothing here raises for what a model directory holds.
"""

from __future__ import annotations

import json
import os
import struct

from .modeldir import MAX_JSON_DEPTH, ModelDir, Problem, _deeper_than
from .json_numbers import integer

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple

HEADER_CAP = 32 * 1024 * 1024
INDEX = "model.safetensors.index.json"


class Header:
    """One file's tensors: name -> shape (a list of ints), from its header; name -> dtype string
    ("BF16", "F8_E4M3", "I32", ...) and name -> the byte count its data_offsets span (None where
    they are not two ordered integers): what the weights take, never read."""

    __slots__ = ("file", "shapes", "bytes_read", "dtypes", "spans")

    def __init__(
        self,
        file: str,
        shapes: Dict[str, List[int]],
        bytes_read: int,
        dtypes: Optional[Dict[str, str]] = None,
        spans: Optional[Dict[str, Optional[int]]] = None,
    ) -> None:
        self.file, self.shapes, self.bytes_read = file, shapes, bytes_read
        self.dtypes: Dict[str, str] = dtypes or {}
        self.spans: Dict[str, Optional[int]] = spans or {}


def read_header(model: ModelDir, name: str, cap: int = HEADER_CAP) -> Tuple[Optional[Header], Optional[Problem]]:
    """The header of `name` in the model directory, or (None, problem); (None, None) when the file
    does not exist."""
    st = model.state(name)
    if not st.exists:
        return None, None
    if not st.usable:
        return None, st.problem
    if st.size < 8:
        return None, Problem(name, f"is {st.size} bytes, too short for a safetensors header (truncated?)")
    try:
        with open(os.path.join(model.path, name), "rb", buffering=0) as fh:
            length = struct.unpack("<Q", _read_exactly(fh, 8))[0]
            if length > cap:
                return None, Problem(name, f"declares a {length}-byte safetensors header, over the {cap}-byte cap; not read")
            if 8 + length > st.size:
                return None, Problem(name, f"declares a {length}-byte header but has {st.size} bytes (truncated?); not read")
            raw = _read_exactly(fh, length)
    except (OSError, EOFError) as exc:
        return None, Problem(name, f"cannot be read ({exc})")
    try:
        header = json.loads(raw.decode("utf-8"))
    except RecursionError:
        return None, Problem(name, "has a safetensors header nested deeper than Python can parse; not read")
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        return None, Problem(name, f"has a safetensors header that is not valid JSON ({exc})")
    if not isinstance(header, dict) or _deeper_than(header, MAX_JSON_DEPTH):
        return None, Problem(name, "has a safetensors header that is not a JSON object of tensors")
    shapes: Dict[str, List[int]] = {}
    dtypes: Dict[str, str] = {}
    spans: Dict[str, Optional[int]] = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (isinstance(shape, list) and all(integer(d) is not None for d in shape)):
            return None, Problem(name, f"has a safetensors header whose tensor {key!r} has no valid shape")
        shapes[key] = shape
        dtype = entry.get("dtype")
        if isinstance(dtype, str):
            dtypes[key] = dtype
        spans[key] = _span(entry.get("data_offsets"))
    return Header(name, shapes, 8 + length, dtypes, spans), None


def _span(offsets: object) -> Optional[int]:
    """The byte count of `[begin, end]` data_offsets, or None when they are not that."""
    if isinstance(offsets, list) and len(offsets) == 2 and all(integer(o) is not None for o in offsets):
        begin, end = offsets
        if 0 <= begin <= end:
            return end - begin
    return None


def _read_exactly(fh: object, count: int) -> bytes:
    """`count` bytes from an unbuffered file (a raw read may return fewer)."""
    chunks: List[bytes] = []
    left = count
    while left:
        chunk = fh.read(left)  # type: ignore[attr-defined]
        if not chunk:
            raise EOFError(f"file ended {left} bytes before the {count} expected")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def weight_map(model: ModelDir) -> Tuple[Optional[Dict[str, str]], Optional[Problem]]:
    """tensor name -> file, from model.safetensors.index.json; (None, None) without an index."""
    index, problem = model.read_json(INDEX)
    if problem is not None and index is None:
        return None, problem
    if index is None:
        return None, None
    mapping = index.get("weight_map") if isinstance(index, dict) else None
    if not (isinstance(mapping, dict) and all(isinstance(v, str) for v in mapping.values())):
        return None, Problem(INDEX, "has no weight_map of tensor names to file names; ignored")
    return mapping, None


def weight_files(model: ModelDir) -> List[str]:
    """Top-level *.safetensors files: what vLLM loads when there is no index."""
    return [n for n in model.names() if n.endswith(".safetensors")]


def tensor_names(model: ModelDir, max_files: int = 64) -> Tuple[List[str], str, List[Problem]]:
    """(the checkpoint's tensor names, where they came from, problems), from metadata only: the
    index's weight_map when there is one (no header read), else the headers of the top-level
    *.safetensors files (at most `max_files`: a checkpoint without an index is one file or a
    handful). A file that cannot be read is a problem; its names are missing from the list."""
    mapping, problem = weight_map(model)
    if mapping is not None:
        return sorted(mapping), INDEX, []
    problems = [problem] if problem is not None else []
    files = weight_files(model)
    names: List[str] = []
    for name in files[:max_files]:
        header, bad = read_header(model, name)
        if header is not None:
            names.extend(header.shapes)
        elif bad is not None:
            problems.append(bad)
    where = "the safetensors headers" if files else "no *.safetensors file"
    return sorted(names), where, problems
