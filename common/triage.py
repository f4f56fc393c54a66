"""triage: from failure logs to the rule that fixes them.

Each file (plain text, .gz, or a JSON error report) gets one code of the registry
(common/codes.py): a runtime rule, a build patch (L*), an honest class for what no repair fixes
(OOM, DEVICE, GGUF, NETWORK, REMOTE_CODE), or `unknown`, with the evidence line and the fix.

Logs can be gigabytes: they are read in blocks, never whole. Each signature has a literal anchor
(its longest plain substring), and anchors that share a short key are searched together: a block
is searched for each key with bytes.find, and a signature's regular expression runs only on the
lines that hold its anchor. Invalid UTF-8 is replaced, never fatal. A large plain file is split
in ranges of whole lines, one process a core, since the searches are CPU-bound and the ranges
independent.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import re
import threading
import zlib
from itertools import repeat

from .start.log import say
from .codes import all_codes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, Iterator, List, Optional, Tuple

BLOCK = 4 << 20
# A plain file gets one process per core of this process's, each a range of at least this many
# bytes: below it a second process costs more than it saves.
RANGE_MIN_BYTES = 32 << 20
JSON_REPORT_CAP = 64 << 20  # a JSON report larger than this is scanned as text
EVIDENCE_CHARS = 300
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Regex syntax that ends a literal run; `\` followed by one of these letters is a class, not a literal.
_META = set(".^$*+?{}[]|()")
_CLASS_ESCAPES = set("dDsSwWbBAZ")
# How a card shows up in a log's path when --card is not given.
CARD_ALIASES = {
    "iluvatar-bi100": ("iluvatar-bi100", "iluvatar", "bi100", "bi-100"),
    "hygon-k100": ("hygon-k100", "hygon", "k100", "dcu"),
    "nv-a100": ("nv-a100", "a100", "nvidia"),
}


# Substrings that several anchors share: a block is searched once per key, not once per signature.
# The searches are the cost: each key is one pass over every block, and a pass costs about the
# same whatever the key (a longer one a little less), so the number of distinct keys sets the
# throughput (the regexes only run on the few lines that hold a key). A key must also stay rare in
# a healthy engine log: every line that holds it is cut out and tried against its signatures.
# The first key an anchor contains is its key; an anchor with none is its own.
SHARED_KEYS = (
    b"rror",
    b" memory",
    b"supported",
    b"ixformer.",
    b"template",
    b"onnect",
    b" CUDA ",
    b"does not",
    b"has no attribute",
    b"o module",
    b"Unrecognized ",
    b'.py", line ',
    b"assert",
    b"ailed to",
    b"Transformers",
    b" than the ",
)
# The passes a block gets (distinct keys): a new signature whose anchor shares no key above adds
# one, and triage's throughput (`make bench`: triage_mb_per_s) drops with each. The test holds
# this bound, so that a new pass is a decision, not a drift.
MAX_PASSES = 35


class Signature:
    __slots__ = ("code", "title", "fix", "regex", "anchor", "key")

    def __init__(self, code: str, title: str, fix: str, pattern: str) -> None:
        self.code, self.title, self.fix = code, title, fix
        self.regex = re.compile(pattern.encode())
        self.anchor = literal_anchor(pattern).encode()
        self.key = next((k for k in SHARED_KEYS if k in self.anchor), self.anchor)


def literal_anchor(pattern: str) -> str:
    """The longest run of plain characters outside groups and classes in `pattern`: every match
    contains it. Patterns with a top-level `|` have no such run and are refused."""
    best, run, depth, i = "", "", 0, 0
    in_class = False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if depth or in_class or nxt in _CLASS_ESCAPES or nxt.isdigit():
                best, run = max(best, run, key=len), ""
            else:
                run += nxt
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            best, run = max(best, run, key=len), ""
        elif ch == "(":
            depth += 1
            best, run = max(best, run, key=len), ""
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            raise ValueError(f"signature {pattern!r}: split it into one pattern per alternative")
        elif ch in _META:
            if ch in "*?{" and run:  # the quantified character is optional: not part of the run
                run = run[:-1]
            best, run = max(best, run, key=len), ""
        elif depth == 0:
            run += ch
        i += 1
    best = max(best, run, key=len)
    if len(best) < 3:
        raise ValueError(f"signature {pattern!r} has no literal anchor of 3 characters or more")
    return best


def signatures() -> List[Signature]:
    """Every log signature of the registry, in its order: the first class that matches wins."""
    return [Signature(entry.code, entry.title, entry.fix, pattern) for entry in all_codes() for pattern in entry.signatures]


class Triaged:
    __slots__ = ("path", "code", "title", "evidence", "fix", "card", "problem")

    def __init__(self, path: str, card: Optional[str]) -> None:
        self.path, self.card = path, card
        self.code, self.title, self.evidence, self.fix = "unknown", "", "", ""
        self.problem: Optional[str] = None

    def to_json(self) -> Dict[str, Optional[str]]:
        data = {"path": self.path, "code": self.code, "evidence": self.evidence, "fix": self.fix, "card": self.card}
        if self.problem:
            data["problem"] = self.problem
        return data


def _blocks(path: str) -> Iterator[bytes]:
    """The file's bytes in blocks that end on a line boundary (.gz decompressed on the fly)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        yield from _line_blocks(fh, None)


def _line_blocks(fh, end: Optional[int]) -> Iterator[bytes]:
    """Blocks of whole lines from `fh`'s position: to the end of the file, or (`end`) through the
    line that holds byte `end - 1`, which may end past it."""
    rest = b""
    while True:
        size = BLOCK if end is None else min(BLOCK, end - fh.tell())
        data = fh.read(size) if size > 0 else b""
        if not data:
            if end is not None and rest:
                rest += fh.readline()
            if rest:
                yield rest
            return
        data = rest + data
        cut = data.rfind(b"\n")
        if cut == -1:
            rest = data
            continue
        yield data[: cut + 1]
        rest = data[cut + 1 :]


def _range_blocks(fh, start: int, end: int) -> Iterator[bytes]:
    """Blocks of the lines of a plain file that start in [start, end): each line is in exactly one
    range, the one that holds its first byte."""
    if start:
        fh.seek(start - 1)
        fh.readline()  # the line that holds byte start - 1 is the range before's
    yield from _line_blocks(fh, end)


def _range_found(path: str, start: int, end: int, sigs: List[Signature]) -> Dict[int, bytes]:
    with open(path, "rb") as fh:
        return _found(_range_blocks(fh, start, end), sigs)


def range_count(path: str, min_bytes: int = RANGE_MIN_BYTES) -> int:
    """How many ranges, each its own process, a plain file is searched in (1: in this process),
    each at least `min_bytes`. A process is forked only from a single-threaded one (a fork copies
    no other thread, and a lock one held would stay held in the child)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or path.endswith(".gz") or "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return 1
    return max(1, min(cores, os.path.getsize(path) // min_bytes))


def _found_in_file(path: str, sigs: List[Signature], ranges: Optional[int] = None) -> Dict[int, bytes]:
    parts = range_count(path) if ranges is None else ranges
    if parts > 1:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        size = os.path.getsize(path)
        bounds = [size * i // parts for i in range(parts + 1)]
        try:
            with ProcessPoolExecutor(parts, mp_context=multiprocessing.get_context("fork")) as pool:
                found: Dict[int, bytes] = {}
                # In file order: a later range's line is the later match.
                for part in pool.map(_range_found, repeat(path), bounds[:-1], bounds[1:], repeat(sigs)):
                    found.update(part)
                return found
        except (BrokenProcessPool, OSError) as exc:  # no fork, or a range's process died or could not read
            say(f"triage: {path}: searched in one process ({exc})")
    return _found(_blocks(path), sigs)


def _json_report_text(path: str) -> Optional[bytes]:
    """All strings of a JSON error report, one per line (a log embedded in a field keeps its lines)."""
    if os.path.getsize(path) > JSON_REPORT_CAP:
        return None
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8", errors="replace"))
    except ValueError:
        return None
    parts: List[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(data)
    return "\n".join(parts).encode("utf-8", errors="replace") + b"\n"


def _line_at(block: bytes, pos: int) -> bytes:
    start = block.rfind(b"\n", 0, pos) + 1
    end = block.find(b"\n", pos)
    return block[start : end if end != -1 else len(block)]


def _found(blocks: Iterable[bytes], sigs: List[Signature]) -> Dict[int, bytes]:
    """Every signature that matches, by its index in `sigs`, with its last matching line."""
    groups: Dict[bytes, List[Tuple[int, Signature]]] = {}
    for index, sig in enumerate(sigs):
        groups.setdefault(sig.key, []).append((index, sig))
    found: Dict[int, bytes] = {}
    for block in blocks:
        for key, members in groups.items():
            pos = block.find(key)
            while pos != -1:
                line = _line_at(block, pos)
                for index, sig in members:
                    if sig.anchor in line and sig.regex.search(line):
                        found[index] = line
                end = block.find(b"\n", pos)
                pos = block.find(key, end + 1) if end != -1 else -1
    return found


def _winner(found: Dict[int, bytes], sigs: List[Signature]) -> Optional[Tuple[Signature, str]]:
    if not found:
        return None
    index = min(found)
    text = ANSI.sub("", found[index].decode("utf-8", errors="replace")).strip()
    return sigs[index], text[:EVIDENCE_CHARS]


def scan(blocks: Iterable[bytes], sigs: List[Signature]) -> Optional[Tuple[Signature, str]]:
    """The winning signature (earliest in `sigs` that matches anywhere) and its last matching line."""
    return _winner(_found(blocks, sigs), sigs)


def card_from_path(path: str) -> Optional[str]:
    lowered = path.lower()
    for card, aliases in CARD_ALIASES.items():
        if any(alias in lowered for alias in aliases):
            return card
    return None


def triage_file(path: str, card: Optional[str] = None, sigs: Optional[List[Signature]] = None, ranges: Optional[int] = None) -> Triaged:
    """The rule whose signature the log at `path` shows last. A large plain file is searched in
    `ranges` processes side by side (default: range_count's; 1: in this process)."""
    verdict = Triaged(path, card or card_from_path(path))
    sigs = sigs if sigs is not None else signatures()
    try:
        report = _json_report_text(path) if path.endswith(".json") else None
        result = _winner(_found([report], sigs) if report is not None else _found_in_file(path, sigs, ranges), sigs)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        verdict.problem = f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
        say(f"triage: {path}: {verdict.problem}")
        return verdict
    if result is not None:
        sig, evidence = result
        verdict.code, verdict.title, verdict.evidence, verdict.fix = sig.code, sig.title, evidence, sig.fix
    return verdict


def expand(paths: Iterable[str]) -> Iterator[Tuple[str, Optional[str]]]:
    """(file, problem) for every file under `paths`; directories are walked, symlinked ones not."""
    for path in paths:
        if os.path.isdir(path):

            def onerror(exc: OSError) -> None:
                say(f"triage: {exc.filename}: cannot be listed ({exc.strerror})")

            for root, dirs, files in os.walk(path, onerror=onerror):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(root, name)
                    if os.path.isfile(full):
                        yield full, None
        elif os.path.isfile(path):
            yield path, None
        else:
            yield path, "no such file or directory"


def summarize(verdicts: List[Triaged]) -> Dict:
    by_code: Dict[str, int] = {}
    by_card: Dict[str, Dict[str, int]] = {}
    for v in verdicts:
        by_code[v.code] = by_code.get(v.code, 0) + 1
        card = by_card.setdefault(v.card or "unknown", {})
        card[v.code] = card.get(v.code, 0) + 1
    return {
        "files": len(verdicts),
        "by_code": dict(sorted(by_code.items())),
        "by_card": {k: dict(sorted(v.items())) for k, v in sorted(by_card.items())},
    }


def markdown(verdicts: List[Triaged], summary: Dict) -> str:
    def cell(text: str) -> str:
        return (text or "").replace("|", "\\|").replace("\n", " ")

    lines = ["| file | card | code | evidence | fix |", "|---|---|---|---|---|"]
    for v in verdicts:
        evidence = v.evidence or (v.problem or "")
        lines.append(f"| {cell(v.path)} | {v.card or ''} | {v.code} | {cell(evidence)} | {cell(v.fix)} |")
    lines += ["", "| code | files |", "|---|---|"]
    lines += [f"| {code} | {n} |" for code, n in summary["by_code"].items()]
    lines += ["", "| card | " + " | ".join(summary["by_code"]) + " |", "|---|" + "---|" * len(summary["by_code"])]
    for card, counts in summary["by_card"].items():
        lines.append(f"| {card} | " + " | ".join(str(counts.get(c, 0)) for c in summary["by_code"]) + " |")
    return "\n".join(lines) + "\n"


def run(paths: List[str], card: Optional[str], as_json: bool) -> int:
    sigs = signatures()
    verdicts = []
    for path, problem in expand(paths):
        if problem:
            verdict = Triaged(path, card or card_from_path(path))
            verdict.problem = problem
            say(f"triage: {path}: {problem}")
        else:
            try:
                verdict = triage_file(path, card, sigs)
            except Exception as exc:  # one odd file must not cost the report on the others
                verdict = Triaged(path, card or card_from_path(path))
                verdict.problem = f"not triaged ({type(exc).__name__}: {exc})"
                say(f"triage: {path}: {verdict.problem}")
        verdicts.append(verdict)
    summary = summarize(verdicts)
    if as_json:
        print(json.dumps({"files": [v.to_json() for v in verdicts], "summary": summary}, indent=2, ensure_ascii=False))
    else:
        print(markdown(verdicts, summary), end="")
    return 0
