"""What every rule module provides, and what it is handed."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Tuple

from ..modeldir import ModelDir
from ..plan import Finding, Repair
from ..profile import Profile
from ..vllm_args import UserArgs


@dataclass
class Context:
    model: ModelDir
    profile: Profile
    facts: Dict[str, Any]
    user: UserArgs
    env: Mapping[str, str]


@dataclass
class Outcome:
    repairs: List[Repair] = field(default_factory=list)
    findings: List[Finding] = field(default_factory=list)


class Rule:
    """A rule: a stable code, the mismatch it detects, its repair, and the failure it prevents.

    `log_signatures` are regular expressions matched against engine failure logs (triage);
    `doc` is the one-paragraph "why" a user reads when a log line points at this code.
    """

    code: str = ""
    title: str = ""
    doc: str = ""
    fix: str = ""
    log_signatures: Tuple[str, ...] = ()

    def check(self, ctx: Context) -> Outcome:  # pragma: no cover - interface
        raise NotImplementedError

    def finding(self, severity: str, message: str) -> Finding:
        return Finding(self.code, severity, message)
