"""R10: the engine lacks the model's architecture, and the image ships a backport that fits it.

vLLM registers a fixed set of model classes, and an engine generation older than a family has
none for it: vLLM 0.5.5 refuses Qwen3 with `Model architectures ['Qwen3ForCausalLM'] are not
supported for now`, although its transformers (4.55) reads the config. The image carries
backports (common/vllm_plugin/compat_backports: one module per family, written against the
layers of that engine generation, so the vendor's kernels run them). A backport is used only
where the engine's profile says the class is missing and its layer API (`layer_api`, read from
the engine's source, never from a version number) has every class and parameter the backport
calls (asked again of the engine's own Python before the start). The repair puts the plugin
directory first on PYTHONPATH and names the class in COMPAT_BACKPORTS; the plugin registers it
with the engine's ModelRegistry before the model loads. Where no backport fits, the finding is
an error: the model needs a newer engine. A family whose layers carry their own sliding windows
(Gemma 3, EXAONE 4's hybrid) also gets `use_sliding_window: false` in the config the engine
reads: vLLM 0.5.5 applies one window to every layer unless told so, and the backport hands each
windowed layer its own. A family whose layers differ in head size (Gemma 4's wider full-attention
heads) gets the widest as `head_dim`, each layer's own in `per_layer_config`: vLLM 0.5.5 sizes
every layer's KV cache by the one head_dim, and the backport pads the narrower heads to it. The
V1 engine (vLLM 0.11) needs neither: each layer hands its window and head size to the engine's
Attention, whose KV cache is kept per layer; but its hybrid KV cache manager refuses windowed and
full layers whose KV pages differ in size (Gemma 4's wider full-attention heads), so such a model
starts with --disable-hybrid-kv-cache-manager (one cache group; the windowed layers keep every
token, still attending over their window).
Some backports replace a class the engine has, for the configurations it computes differently (the
table's `replaces`): a sliding window shorter than the context the engine serves, a rotary over a
fraction of each head, or any (a class the engine cannot build). vLLM 0.5.5 reads a window over
every layer block by block in decode (Mistral 7B v0.1, Phi-3 mini and medium, Starcoder2: the
backport is the engine's own class with the window handed to each layer), refuses every Gemma 2
under its own transformers 4.55 (its class reads `hidden_act`, which Gemma2Config no longer has)
and would serve it without its every-other-layer window, capping the context to it (the backport
is Gemma 3's, less its q/k norms, with Gemma 2's soft cap), and
rotates all of each Phi-3 head, refusing Phi-4-mini's LongRoPE over 0.75 of it (the backport
rotates the fraction); the engine-wide window is off for all.
"""

from __future__ import annotations

from ..model.headsize import attention_config
from ..model.json_numbers import integer
from ..vllm_plugin.compat_backports import BACKPORTS, ENV, OWN_POOL, fitting, replacing, written_for
from ..vllm_plugin.compat_backports.layers.heads import layer_heads, widest_head_edits
from ..engine.vllm_args import int_arg, switch_arg
from ..vllm_plugin.compat_plugin import PLUGIN_NAME
from .support.base import Context, Outcome, Rule
from .support.plugin import blocker, plugin_repair

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Optional


def windowed(config: dict) -> bool:
    """Whether the config has sliding-window layers (a window, and a sliding layer if it lists types)."""
    window, types = config.get("sliding_window"), config.get("layer_types")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return False
    return not isinstance(types, list) or "sliding_attention" in types


def backported(architectures: List[str], registry) -> Optional[str]:
    """The class of `architectures` this rule serves: none of them registered (vLLM takes the
    first class it has), and the first with a backport. None: not this rule's model."""
    if registry is None or any(a in registry for a in architectures):
        return None
    return next((a for a in architectures if a in BACKPORTS and not replacing(a)), None)


def replaced(architectures: List[str], registry) -> Optional[str]:
    """The engine's class vLLM takes for `architectures` (the first it registers), where the
    image has a backport that replaces it for some configurations; None otherwise."""
    if registry is None:
        return None
    first = next((a for a in architectures if a in registry), None)
    return first if first is not None and replacing(first) else None


def shorter_window(text: dict, max_model_len: Optional[int]) -> Optional[str]:
    """The config's sliding window where it is shorter than the context the engine serves (the
    platform's --max-model-len, else the model's positions), in words; None where there is none
    or it never bites (the engine's own class then serves the model as its author does)."""
    if not windowed(text) or text.get("use_sliding_window") is False:
        return None
    window, positions = text["sliding_window"], text.get("max_position_embeddings")
    context = max_model_len or integer(positions)
    return f"a sliding window of {window} positions, shorter than the context" if context is None or window < context else None


def rotary_fraction(text: dict) -> Optional[str]:
    """The fraction of each head the config rotates, in words, where it is less than all of it
    (transformers 4 writes it at the top, transformers 5 in rope_parameters)."""
    params = text.get("rope_parameters")
    for factor in (text.get("partial_rotary_factor"), params.get("partial_rotary_factor") if isinstance(params, dict) else None):
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and 0 < factor < 1:
            return f"a rotary over {factor:g} of each head"
    return None


def replaced_for(replaces: dict, text: dict, max_model_len: Optional[int]) -> List[str]:
    """The traits of the config a backport replaces the engine's class for (`replaces`: trait ->
    what the engine does): what the engine does with each, said with the trait ([] where the
    engine's own class serves the model)."""
    found = {
        "window": shorter_window(text, max_model_len),
        "partial_rotary": rotary_fraction(text),
        "always": "the configuration its own transformers writes",
    }
    return [f"{found[trait]}: it {does}" for trait, does in replaces.items() if found.get(trait)]


class Backport(Rule):
    code = "R10"
    # vLLM's refusal of a class the image has a backport of (R4 claims the same line for any
    # other class; R10 comes first in the registry, so triage names the repair that applies).
    log_signatures = (
        r"Model architectures \[[^\]]*'(?:"
        + "|".join(sorted(a for a in BACKPORTS if not replacing(a)))
        + r")'[^\]]*\] are not supported for now",
    )

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        raw = ctx.facts.get("architectures")
        architectures = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
        arch = backported(architectures, ctx.profile.architectures)
        over_own = arch is None
        if over_own:
            arch = replaced(architectures, ctx.profile.architectures)
            if arch is None:
                return outcome  # every other model returns here, having read nothing
        config = ctx.model.json_object("config.json")
        why: List[str] = []
        if over_own:
            why = replaced_for(replacing(arch), attention_config(config)[1], int_arg(ctx.user, "--max-model-len"))
            if not why:
                return outcome  # the engine's own class serves this configuration
        auto_map = config.get("auto_map")
        if isinstance(auto_map, dict) and any(k.startswith("AutoModel") for k in auto_map) and not ctx.user.has("--trust-remote-code"):
            return outcome  # the model's own classes: REMOTE_CODE says what that needs
        profile = ctx.profile
        engine = f"vLLM {profile.vllm_version}"
        backport, missing = fitting(arch, profile.layer_api)
        if over_own and missing != []:
            return outcome  # an engine generation the backport is not written for serves its own class (C1 says how well)
        if missing is None:
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"{arch} is not registered in {engine}, and this profile has no snapshot of its layer API: whether the image's backport fits is known only inside the image",
                )
            )
            return outcome
        if missing:
            outcome.findings.append(
                self.finding(
                    "error",
                    f"architecture {arch} is not registered in {engine}, and the image's backport of it, written for "
                    f"{' and '.join(written_for(arch))}, does not fit this engine (its layers lack {', '.join(missing[:4])}): "
                    "this model needs an engine of one of those generations",
                )
            )
            return outcome
        blocked = blocker(ctx, weights=False)
        if blocked is not None:
            severity, why = blocked
            lacks = f"{engine}'s {arch} serves {'; '.join(why)}" if over_own else f"{arch} is not registered in {engine}"
            outcome.findings.append(self.finding(severity, f"{lacks}, and its backport cannot be registered: {why}"))
            return outcome
        if over_own:
            detail = (
                f"{engine} has {arch}, and this model has {'; and '.join(why)}; "
                f"{PLUGIN_NAME} registers the image's backport (compat_backports.{backport.module}) over it"
            )
        else:
            detail = f"{arch} is not registered in {engine}; {PLUGIN_NAME} registers the image's backport (compat_backports.{backport.module}) before the model loads"
        repair = plugin_repair(self.code, self.title, detail, ENV, backport.key)
        key, text = attention_config(config)
        if backport.engine_window_off and (windowed(text) or "sliding_window" not in text):
            # Each layer carries its own window (compat_backports/layers/windows.py); the engine-wide one,
            # which would window the global layers and recycle their blocks, is switched off with
            # the engine's own switch (vLLM 0.5.5 reads `use_sliding_window` on the text config, as
            # for Qwen2). A config that names no window gets the switch too: its class's default
            # (Gemma 3's 4096) is what the engine reads. A nested text config is given whole, as
            # every nested edit is.
            repair.config_edits = {key: dict(text, use_sliding_window=False)} if key else {"use_sliding_window": False}
            # The rules after this one judge the config the engine reads (its KV cache then holds
            # every position of each layer: the block manager keeps no window).
            ctx.config_edits.update(repair.config_edits)
            repair.detail += "; its layers take their own sliding windows (the engine-wide window off: use_sliding_window false)"
        if backport.recurrent:
            refused = state_refusals(ctx, text, backport.recurrent)
            if refused:
                # The backport refuses these at start (qwen3_5.py, qwen3_5_v1.py): said here, before the start.
                outcome.findings.append(
                    self.finding("error", f"{arch} is served by the image's backport, which keeps a state per sequence: {refused}")
                )
                return outcome
        if backport.recurrent == OWN_POOL:
            # vLLM 0.5.5's backport keeps the states in a pool of its own, indexed by the batch's
            # sequences in Python each step; a CUDA graph would replay the slots of the batch it
            # was captured with. (A V1 backport's states are the engine's, in its own cache, whose
            # slots its CUDA graphs read from the metadata as for the engine's own hybrids.)
            repair.args = ["--enforce-eager"]
            repair.detail += "; it keeps each sequence's recurrent state itself (started with --enforce-eager: no CUDA graphs)"
        if backport.heads and not backport.widest_heads:
            # Each layer attends at its own head size (a V1 engine's KV cache is per layer): the
            # card's kernels must take every one of them (H1), and each layer's cache is its own (KV).
            try:
                heads = layer_heads(text)
            except (TypeError, ValueError):
                heads = []  # the backport refuses the config itself
            ctx.layer_heads = heads if all(integer(s, 1) and integer(k, 1) for s, k in heads) else []
        if backport.one_cache_group and switch_arg(ctx.user, "--disable-hybrid-kv-cache-manager") is None:
            mixed = mixed_page_sizes(text, int_arg(ctx.user, "--tensor-parallel-size") or 1)
            if mixed and profile.accepts("disable_hybrid_kv_cache_manager"):
                # The V1 engine's hybrid KV cache manager takes windowed and full layers of one
                # page size only (Backport.one_cache_group).
                repair.args = repair.args + ["--disable-hybrid-kv-cache-manager"]
                repair.detail += f"; its windowed and full layers' KV caches differ in page size ({mixed}): one KV cache group"
                ctx.whole_windows = True
        if backport.widest_heads:
            try:
                heads = widest_head_edits(text)
            except (TypeError, ValueError) as e:
                heads = {}  # the backport refuses the config itself, with the engine's reason
                repair.detail += f"; its per-layer head sizes are not readable ({e})"
            if heads:
                # vLLM 0.5.5 sizes every layer's KV cache by the one head_dim; narrower layers pad to it.
                edits = {key: dict(repair.config_edits.get(key, text), **heads)} if key else heads
                repair.config_edits = dict(repair.config_edits, **edits)
                ctx.config_edits.update(edits)
                shape = ", ".join(f"{k} {v}" for k, v in heads.items() if k != "per_layer_config")
                repair.detail += (
                    f"; its layers' heads differ (the engine's cache shape the widest: {shape}; each layer's own in per_layer_config)"
                )
        # The profile was baked from the image's engine; the start asks that engine itself too.
        repair.engine_check = {"kind": "layer_api", "requires": {k: list(v) for k, v in backport.requires.items()}}
        outcome.repairs.append(repair)
        return outcome


def mixed_page_sizes(text: dict, tp: int) -> str:
    """Where the config's windowed and full layers hold KV caches of different page sizes on one
    of `tp` ranks (each layer's KV heads split over the ranks, at least one each, times its head
    size), the sizes in words; "" where the layers are of one kind or one page size, or their
    heads are not readable (the backport then refuses the config itself)."""
    try:
        heads = layer_heads(text)
    except (TypeError, ValueError):
        return ""
    types = text.get("layer_types")
    if not windowed(text) or not isinstance(types, list) or len(types) != len(heads):
        return ""
    pages = {}
    for kind, (size, kv) in zip(types, heads, strict=True):
        if not (integer(size) and integer(kv)):
            return ""
        pages.setdefault(kind, set()).add(max(1, kv // tp) * size)
    if len(pages) < 2 or len(set().union(*pages.values())) < 2:
        return ""
    return "; ".join(f"{kind} {sorted(sizes)}" for kind, sizes in sorted(pages.items())) + " KV heads x head size a rank"


def state_refusals(ctx: Context, text: dict, kept: str) -> str:
    """What the platform's arguments ask that a backport with per-sequence state cannot serve
    ("" when nothing): pipeline stages, linear-attention heads that do not split over the
    tensor-parallel ranks (each rank keeps whole heads' states), or, where the backport keeps
    the states in a pool of its own (`kept`), a prefix cache (a cached prefix has no state; the
    V1 engine turns prefix caching off for a hybrid by itself, and serves it)."""

    asked = []
    pp = int_arg(ctx.user, "--pipeline-parallel-size")
    if pp and pp > 1:
        asked.append(f"--pipeline-parallel-size {pp} (not supported yet)")
    tp = int_arg(ctx.user, "--tensor-parallel-size") or 1
    keys = text.get("linear_num_key_heads")
    if tp > 1 and integer(keys) is not None and keys % tp:
        asked.append(f"--tensor-parallel-size {tp} (its {keys} linear-attention key heads do not split over {tp} ranks)")
    if kept == OWN_POOL and switch_arg(ctx.user, "--enable-prefix-caching"):
        asked.append("--enable-prefix-caching (a cached prefix has no recurrent state to continue from)")
    return "; ".join(asked)


RULE = Backport()
