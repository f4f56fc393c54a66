"""What a preflight decided: repairs, findings, and the argv/env they add up to."""

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

SEVERITIES = ("info", "warning", "error")


@dataclass
class Finding:
    """Something a person should know that no repair (or no verified repair) covers."""

    code: str
    severity: str
    message: str

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class Repair:
    """One rule's fix. `overlay` maps a metadata file name to the keys to set (None: drop the key)
    in the work-dir copy of that file; repairs that share an overlay are verified together."""

    code: str
    title: str
    detail: str
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    overlay: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    hf_overrides: Dict[str, Any] = field(default_factory=dict)
    verified: Optional[bool] = None
    verification: str = ""

    def to_json(self) -> Dict[str, Any]:
        data = {
            "code": self.code,
            "title": self.title,
            "detail": self.detail,
            "args": list(self.args),
            "env": dict(self.env),
            "verified": self.verified,
        }
        if self.verification:
            data["verification"] = self.verification
        return data


@dataclass
class Plan:
    card: str
    model_dir: str
    facts: Dict[str, Any] = field(default_factory=dict)
    repairs: List[Repair] = field(default_factory=list)
    findings: List[Finding] = field(default_factory=list)
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    work_dir: Optional[str] = None
    # The platform's arguments as they will be passed (a user --hf-overrides may absorb ours).
    user_args: List[str] = field(default_factory=list)

    def add_finding(self, code: str, severity: str, message: str) -> None:
        self.findings.append(Finding(code, severity, message))

    def to_json(self) -> Dict[str, Any]:
        return {
            "card": self.card,
            "model_dir": self.model_dir,
            "facts": self.facts,
            "repairs": [r.to_json() for r in self.repairs],
            "findings": [f.to_json() for f in self.findings],
            "args": list(self.args),
            "env": dict(self.env),
            "user_args": list(self.user_args),
            "work_dir": self.work_dir,
        }
