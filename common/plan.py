"""What a preflight decided: repairs, findings, and the argv/env they add up to.

Plain classes, not dataclasses: importing dataclasses costs more than the whole clean-path
preflight, and this runs at every container start.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple


class Finding:
    """Something a person should know that no repair (or no verified repair) covers."""

    __slots__ = ("code", "severity", "message")

    def __init__(self, code: str, severity: str, message: str) -> None:
        self.code, self.severity, self.message = code, severity, message

    def to_json(self) -> Dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message}

    def __repr__(self) -> str:
        return f"Finding({self.code!r}, {self.severity!r}, {self.message!r})"


class Repair:
    """One rule's fix. `overlay` maps a metadata file name to the keys to set (None: drop the key)
    in the work-dir copy of that file; repairs that share an overlay are verified together.
    `verified` is True, False (failed: dropped) or None (could not be checked: dropped)."""

    def __init__(
        self,
        code: str,
        title: str,
        detail: str,
        args: Optional[List[str]] = None,
        env: Optional[Dict[str, str]] = None,
        overlay: Optional[Dict[str, Dict[str, Any]]] = None,
        hf_overrides: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.code, self.title, self.detail = code, title, detail
        self.args: List[str] = list(args or [])
        self.env: Dict[str, str] = dict(env or {})
        self.overlay: Dict[str, Dict[str, Any]] = dict(overlay or {})
        self.hf_overrides: Dict[str, Any] = dict(hf_overrides or {})
        # Top-level config.json keys this repair sets (a nested text_config is given whole). The
        # planner carries them the best way the engine allows: --hf-overrides, --hf-config-path
        # with a rewritten config.json, or a model view (common/start/model_view.py).
        self.config_edits: Dict[str, Any] = {}
        # Whole files a model view must hold that the model lacks (name -> JSON content), and the
        # engine-side processor check of that view (common/start/model_view.py).
        self.view_files: Dict[str, Dict[str, Any]] = {}
        self.processor_check: Optional[Dict[str, Any]] = None
        # Path-like variables to extend: the value goes in front of what the environment has.
        self.path_prepend: Dict[str, str] = {}
        # A file this repair writes into the run's work dir, passed as `flag PATH`: (flag, name, text).
        self.work_file: Optional[Tuple[str, str, str]] = None
        # An edit of the engine's own source at start: (dotted module, transform for common.engine.patching).
        self.engine_patch: Optional[Tuple[str, Callable[[str], str]]] = None
        # A request the engine's Python answers before the repair is used (engine_checks/process.py):
        # verified when it answers ok, dropped with a finding otherwise.
        self.engine_check: Optional[Dict[str, Any]] = None
        self.verified: Optional[bool] = None
        self.verification = ""

    def to_json(self) -> Dict[str, Any]:
        data = {
            "code": self.code,
            "title": self.title,
            "detail": self.detail,
            "args": list(self.args),
            "env": dict(self.env, **self.path_prepend),
            "verified": self.verified,
        }
        if self.hf_overrides:
            data["hf_overrides"] = dict(self.hf_overrides)
        if self.config_edits:
            data["config_edits"] = dict(self.config_edits)
        if self.view_files:
            data["view_files"] = sorted(self.view_files)
        if self.verification:
            data["verification"] = self.verification
        return data


class Plan:
    def __init__(self, card: str, model_dir: str) -> None:
        self.card = card
        self.model_dir = model_dir
        self.facts: Dict[str, Any] = {}
        self.repairs: List[Repair] = []
        self.findings: List[Finding] = []
        self.args: List[str] = []
        self.env: Dict[str, str] = {}
        self.work_dir: Optional[str] = None
        # The platform's arguments as they will be passed (a user --hf-overrides may absorb ours).
        self.user_args: List[str] = []
        # What vLLM serves: the model directory, or a model view of it (then `view` says why).
        self.model_path: str = model_dir
        self.view: Optional[Dict[str, Any]] = None

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
            "model_path": self.model_path,
            "view": self.view,
            "work_dir": self.work_dir,
        }
