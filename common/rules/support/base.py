"""What every rule module provides, and what it is handed."""

from __future__ import annotations

import sys

from ...code_kinds import RUNTIME
from ...model.modeldir import ModelDir
from ...plan import Finding, Repair
from ...engine.profile import Profile
from ...engine.vllm_args import UserArgs
from .pages import PAGES

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple


class Context:
    """What a rule may look at: the model, the card's engine profile, the facts, the user's args."""

    def __init__(
        self, model: ModelDir, profile: Profile, facts: Dict[str, Any], user: UserArgs, env: Mapping[str, str], doctor: bool = False
    ) -> None:
        self.model, self.profile, self.facts, self.user, self.env = model, profile, facts, user, env
        # doctor's judgement rather than a container start: checks too costly for every start
        # (reading every weight file's header) run only then.
        self.doctor = doctor
        # Model types R12 registers a config class for (it runs before CONFIG, which counts
        # them as known): a rule skipped by COMPAT_SKIP registers nothing.
        self.registered_config_types: set = set()
        # config.json edits an earlier rule makes that change what the engine sizes (R10's widest
        # head for layers of several head sizes): H1 and KV judge the config the engine reads.
        self.config_edits: Dict[str, Any] = {}
        # How the engine keeps each layer's KV cache where a repair makes it differ from the
        # config's one shape (R10's backports for the V1 engine, whose KV cache is per layer):
        # each layer's (head size, KV heads), empty for the config's own; and whether windowed
        # layers keep every token (the hybrid KV cache manager off). H1 and KV judge them.
        self.layer_heads: List[Tuple[int, int]] = []
        self.whole_windows = False


class Outcome:
    def __init__(self, repairs: Optional[List[Repair]] = None, findings: Optional[List[Finding]] = None) -> None:
        self.repairs: List[Repair] = list(repairs or [])
        self.findings: List[Finding] = list(findings or [])


class Rule:
    """A rule: a stable code, the mismatch it detects, its repair, and the failure it prevents.

    A subclass names its code; its page (kind, title, fix, `log_signatures`: regular
    expressions matched against engine failure logs by triage) is read from the rules' table
    (support/pages.py), and `doc`, the "why" a user reads when a log line points at this code, is its
    module's docstring after the first paragraph.
    """

    code: str = ""
    kind: str = RUNTIME
    title: str = ""
    doc: str = ""
    fix: str = ""
    log_signatures: Tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        page = PAGES[cls.code]  # a rule without a page is a KeyError at import: its test names it
        cls.kind, cls.title, cls.fix = page.kind, page.title, page.fix
        if "log_signatures" not in cls.__dict__:  # R10 and R13 compute theirs from their tables
            cls.log_signatures = page.signatures
        docstring = sys.modules[cls.__module__].__doc__ or ""
        cls.doc = docstring.split("\n\n", 1)[-1].strip()

    def check(self, ctx: Context) -> Outcome:  # pragma: no cover - interface
        raise NotImplementedError

    def finding(self, severity: str, message: str) -> Finding:
        return Finding(self.code, severity, message)


class Scoped:
    """A registry entry for a rule that can only concern some models: its module is imported,
    and its check run, only for a model inside its scope (any of `files` at the model's top
    level, config.json's `model_type` among `model_types`, or one of its `architectures` among
    `architectures`). A model outside every scope pays nothing for these rules, not even their
    import. A scope must hold everything the rule's check can act on (tested against the rule's
    own tables); the rule's other attributes are the rule's own."""

    def __init__(
        self,
        module: str,
        code: str,
        files: Tuple[str, ...] = (),
        model_types: Tuple[str, ...] = (),
        architectures: Tuple[str, ...] = (),
        card_architectures: Optional[Mapping[str, Tuple[str, ...]]] = None,
    ) -> None:
        self.module, self.code = module, code
        self.files, self.model_types, self.architectures = files, frozenset(model_types), frozenset(architectures)
        # card -> architectures: a scope that depends on the card's engine (C1's cells).
        self.card_architectures = {card: frozenset(a) for card, a in (card_architectures or {}).items()}
        self._rule: Optional[Rule] = None

    @property
    def rule(self) -> Rule:
        if self._rule is None:
            import importlib

            rules = __package__.rsplit(".", 1)[0]  # the rule modules sit one package above support/
            self._rule = importlib.import_module(f"{rules}.{self.module}").RULE
            if self._rule.code != self.code:
                raise ValueError(f"registry line {self.module} says {self.code}, the module says {self._rule.code}")
        return self._rule

    def in_scope(self, ctx: Context) -> bool:
        if any(ctx.model.state(name).exists for name in self.files):
            return True
        config = ctx.model.json_object("config.json")
        model_type = config.get("model_type")
        if isinstance(model_type, str) and model_type in self.model_types:
            return True
        mine = self.architectures | self.card_architectures.get(ctx.profile.card, frozenset())
        return bool(mine.intersection(a for a in ctx.facts.get("architectures") or () if isinstance(a, str)))

    def check(self, ctx: Context) -> Outcome:
        return self.rule.check(ctx) if self.in_scope(ctx) else Outcome()

    def __getattr__(self, name: str) -> Any:  # kind, title, doc, fix, log_signatures: the rule's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.rule, name)
