"""What every rule module provides, and what it is handed."""

from __future__ import annotations


from ..modeldir import ModelDir
from ..plan import Finding, Repair
from ..profile import Profile
from ..vllm_args import UserArgs

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple


class Context:
    """What a rule may look at: the model, the card's engine profile, the facts, the user's args."""

    def __init__(self, model: ModelDir, profile: Profile, facts: Dict[str, Any], user: UserArgs, env: Mapping[str, str]) -> None:
        self.model, self.profile, self.facts, self.user, self.env = model, profile, facts, user, env


class Outcome:
    def __init__(self, repairs: Optional[List[Repair]] = None, findings: Optional[List[Finding]] = None) -> None:
        self.repairs: List[Repair] = list(repairs or [])
        self.findings: List[Finding] = list(findings or [])


class Rule:
    """A rule: a stable code, the mismatch it detects, its repair, and the failure it prevents.

    `log_signatures` are regular expressions matched against engine failure logs (triage);
    `doc` is the one-paragraph "why" a user reads when a log line points at this code.
    """

    code: str = ""
    # "runtime repair" (R*, H*: it may add arguments), or "runtime check" (it only finds what no
    # repair fixes, so doctor can say "fails" before the platform tries).
    kind: str = "runtime repair"
    title: str = ""
    doc: str = ""
    fix: str = ""
    log_signatures: Tuple[str, ...] = ()

    def check(self, ctx: Context) -> Outcome:  # pragma: no cover - interface
        raise NotImplementedError

    def finding(self, severity: str, message: str) -> Finding:
        return Finding(self.code, severity, message)
