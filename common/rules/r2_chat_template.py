"""R2: the model ships no chat template, so vLLM answers every chat request with HTTP 400.

transformers finds a template in `chat_template.jinja`, `chat_template.json` or
tokenizer_config.json's `chat_template` (a string, or a list of named templates). When none is
there, the image writes one to the work dir and passes `--chat-template`: ChatML when the
vocabulary has `<|im_start|>`/`<|im_end|>`, else a plain role template around the model's own
bos/eos tokens. The template is rendered in jinja2's ImmutableSandboxedEnvironment with a sample
conversation before it is used. Skipped when the platform passes `--chat-template`, for pooling
runners (`--runner pooling`, `--task embed|classify|score|reward`), and with
COMPAT_CHAT_TEMPLATE=off. A template the model does ship is scanned for attempts to reach Python
internals through the sandbox; such a template is reported, never run here.
"""

from __future__ import annotations

import re

from ..engine.chat_templates import CHATML, CHATML_MARKERS, PLAIN_ROLES, SAMPLE_CONVERSATION
from ..model.tokenizer_files import chat_template_source, token_text, tokenizer_config
from ..plan import Repair
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, Optional, Set, Tuple

NON_CHAT_TASKS = ("embed", "embedding", "classify", "score", "reward")
TEMPLATE_FILE = "chat_template.jinja"
# Attribute walks that only a sandbox escape needs (e.g. ''.__class__.__mro__[1].__subclasses__()).
ESCAPE_PATTERN = r"__(?:class|mro|subclasses|globals|builtins|import|init|base|bases|code|dict)__"


def vocabulary_markers(ctx: Context) -> Set[str]:
    """Which ChatML markers the tokenizer has as tokens (added tokens first, then the vocab)."""
    found: Set[str] = set()
    decoder = tokenizer_config(ctx.model).get("added_tokens_decoder")
    if isinstance(decoder, dict):
        found |= {token_text(v) for v in decoder.values()} & set(CHATML_MARKERS)  # type: ignore[operator]
    if found >= set(CHATML_MARKERS):
        return found
    tokenizer = ctx.model.json_object("tokenizer.json")
    added = tokenizer.get("added_tokens")
    if isinstance(added, list):
        found |= {token_text(t) for t in added} & set(CHATML_MARKERS)  # type: ignore[operator]
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        found |= {m for m in CHATML_MARKERS if m in vocab}
    return found


def render_check(template: str, special: Dict[str, str]) -> Tuple[bool, str]:
    """Render `template` in jinja2's immutable sandbox with the sample conversation."""
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return False, "jinja2 is not importable here; template not checked"
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        text = env.from_string(template).render(messages=list(SAMPLE_CONVERSATION), add_generation_prompt=True, **special)
    except TemplateError as exc:
        return False, f"template does not render: {type(exc).__name__}: {exc}"
    missing = [m["content"] for m in SAMPLE_CONVERSATION if m["content"] not in text]
    if missing:
        return False, f"rendered text lacks {missing[0]!r}"
    return True, f"renders the sample conversation ({len(text)} characters)"


class ChatTemplate(Rule):
    code = "R2"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        source = chat_template_source(ctx.model)
        if source is not None:
            self._scan_shipped(ctx, source, outcome)
            return outcome
        skip = self._skip_reason(ctx)
        if skip:
            outcome.findings.append(self.finding("info", f"no chat template; not added: {skip}"))
            return outcome
        config = tokenizer_config(ctx.model)
        special = {k: token_text(config.get(k)) or "" for k in ("bos_token", "eos_token")}
        chatml = vocabulary_markers(ctx) >= set(CHATML_MARKERS)
        template = CHATML if chatml else PLAIN_ROLES
        kind = "ChatML (the vocabulary has <|im_start|>/<|im_end|>)" if chatml else "plain role template"
        repair = Repair(self.code, self.title, f"no chat template in the model; using a {kind}")
        repair.work_file = ("--chat-template", TEMPLATE_FILE, template)
        repair.verified, repair.verification = render_check(template, special)
        if not repair.verified:
            outcome.findings.append(self.finding("error", f"R2 dropped: {repair.verification}"))
        outcome.repairs.append(repair)
        return outcome

    @staticmethod
    def _skip_reason(ctx: Context) -> Optional[str]:
        if ctx.env.get("COMPAT_CHAT_TEMPLATE", "").strip().lower() in ("off", "0", "false", "no"):
            return "COMPAT_CHAT_TEMPLATE=off"
        if ctx.user.has("--chat-template"):
            return "--chat-template is given"
        runner = (ctx.user.value("--runner") or "").lower()
        if runner == "pooling":
            return "--runner pooling serves no chat"
        task = (ctx.user.value("--task") or "").lower()
        if task in NON_CHAT_TASKS:
            return f"--task {task} serves no chat"
        return None

    def _scan_shipped(self, ctx: Context, source: str, outcome: Outcome) -> None:
        if source == "tokenizer_config.json":
            raw = tokenizer_config(ctx.model).get("chat_template")
            text = (
                raw
                if isinstance(raw, str)
                else " ".join(t.get("template", "") for t in raw if isinstance(t, dict) and isinstance(t.get("template"), str))
            )
        else:
            text, _ = ctx.model.read_text(source)
        escape = re.search(ESCAPE_PATTERN, text) if text and "__" in text else None
        if escape:
            outcome.findings.append(
                self.finding(
                    "error",
                    f"the chat template in {source} reaches for Python internals ({escape.group(0)}); vLLM's sandbox will refuse it",
                )
            )


RULE = ChatTemplate()
