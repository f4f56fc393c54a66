"""Answer check requests with this interpreter's own transformers: the engine side of common/start/verify.py.

usage: python process.py [--warm] [REQUESTS.json]   (without a file: the JSON list on stdin)
       --warm: import what an engine request needs (model_build.py: vLLM and torch) before the
       requests are read, so that a caller can start this process while it still plans them
       (doctor over a folder: the engine's import overlaps the checks before it)

Run under the engine's interpreter as a script: stdlib, transformers and tokenizers, and of the
runtime package only its standalone modules (engine/patching.py, engine_checks/layer_api.py,
engine_checks/model_build.py), imported by name with the package's root last on sys.path. One process answers every request of a start, in order,
one JSON line each, flushed at once: a caller that has to kill a slow run keeps what was answered.

Requests and the fields their answers add:
  {"kind": "tokenizer", "overlay": DIR, "model": DIR}
      "class", "special_ids": {token: id}.  Does the overlay load with the model's own ids?
      The reference is the model's tokenizer.json read by `tokenizers` directly: every special
      token there and in the rewritten config keeps its id, and a probe text mixing words,
      digits, non-ASCII and special tokens encodes to the same ids.
  {"kind": "module", "name": DOTTED}
      "path": the module's source file for this interpreter (nothing is imported); ok null when
      the module's top-level package is not installed here (not the engine's interpreter).
  {"kind": "layer_api", "requires": {SYMBOL: [param, ...]}}
      "missing": what of `requires` this interpreter's vLLM does not define ("file:Class[.method]"
      symbols with the parameters a backport passes, read from its source: layer_api.py).
  {"kind": "config", "path": DIR, "trust_remote_code": bool, "attributes": [name, ...],
   "register": [model_type, ...]}
      "class", "model_type", "attributes": {name: value} as this transformers reads them
      (missing ones left out), and "text_config" (the same three) when the config nests one.
      `register` (R12): the image's config classes (vllm_plugin/compat_configs) for these types
      are registered with AutoConfig first, as the engine's process registers them.
  {"kind": "processor", "path": DIR, "trust_remote_code": bool, "processor_class": NAME or null,
   "components": {"image_processor": {key: value}, ...}}
      "class", "components": {name: class}.  Does AutoProcessor load from DIR (where the engine
      loads it: the model path or a model view), as `processor_class`, with each component's
      values as given (its nested processor_config.json entries; class-name keys left out)?
      Torch-free like the others: the slow (PIL) image processors need no torch.
  {"kind": "model_build", "path": DIR, "args": [vllm serve argument, ...], "env": {NAME: value},
   "register_plugin": bool}
      "stage", "vllm", "class", "parameters", "error": {"type", "message", "file", "line",
      "function"}.  Does the engine construct its model class for DIR (the path it is given: the
      model or doctor's model view) with ARGS (the repairs' and the platform's), on the meta
      device, in a process with ENV (the repairs' variables) and the image's plugin registered?
      ok false: its model code (or the plugin's) refuses the configuration; ok null: cannot tell.
      Answered by model_build.py, imported only for this request: it imports vLLM and torch, so
      verify.py starts such requests in a process of their own, without TORCH_OFF.
Every answer: "index", "kind", "ok" (true, false, or null: this interpreter cannot check, e.g.
no transformers, or a request of RUNTIME_KINDS where a package called `common` in the engine's
image shadows the runtime package), "reason", "transformers" (version or null), "torch_loaded".
Requests that cannot be read get one answer with index null, and the process exits 2.

Torch is never needed to read a tokenizer or a config, and importing it costs seconds and
hundreds of MB. transformers 4.x leaves it alone under USE_TORCH=0 (verify.py sets it for this
process); transformers 5 dropped that switch, so there torch is hidden the way a torch-less
install looks, unless a request runs the model's own code, which may import it for real.
"""

import json
import math
import os
import sys

# The runtime package's root (common/ is in it), appended to sys.path by main: last, so that none
# of the engine's own packages is shadowed.
RUNTIME_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The checks answered with the runtime package's own modules, imported by name (the rest read
# only transformers, tokenizers and the image's plugin directory).
RUNTIME_KINDS = ("module", "layer_api", "model_build")


def foreign_common() -> str:
    """Why the runtime package cannot be imported by name here, or "": with its root last on
    sys.path, a top-level package called `common` in the engine's image would be imported in its
    place (a check of RUNTIME_KINDS would then fail on a missing submodule, naming nothing)."""
    import importlib.util

    spec = importlib.util.find_spec("common")
    found = os.path.realpath(spec.origin) if spec and spec.origin else None
    ours = os.path.realpath(os.path.join(RUNTIME_ROOT, "common", "__init__.py"))
    if found == ours:
        return ""
    return f"the package `common` this Python imports is {found}, not the compat runtime's {ours}: a package of that name in the engine's image shadows it"


PROBE_WORDS = "Hello, world! 12345 tiny models ünïcödé 漢字 "


def _strings(values):
    out = []
    for item in values or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("content"), str):
            out.append(item["content"])
    return out


def _configured_specials(tok):
    specials = set()
    for value in tok.special_tokens_map.values():
        specials.update([value] if isinstance(value, str) else _strings(value))
    return specials


def check_tokenizer(request):
    from transformers import AutoTokenizer

    overlay, model_dir = request["overlay"], request["model"]
    tok = AutoTokenizer.from_pretrained(overlay, trust_remote_code=False)
    result = {"class": type(tok).__name__, "special_ids": {}}
    specials = _configured_specials(tok)
    reference = os.path.join(model_dir, "tokenizer.json")
    if os.path.isfile(reference):
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(reference)
        with open(reference, encoding="utf-8") as fh:
            added = json.load(fh).get("added_tokens") or []
        expected = {t["content"]: t["id"] for t in added if t.get("special")}
        for token in specials:
            if raw.token_to_id(token) is not None:
                expected.setdefault(token, raw.token_to_id(token))
        for token, want in sorted(expected.items()):
            got = tok.convert_tokens_to_ids(token)
            result["special_ids"][token] = got
            if got != want:
                return dict(result, ok=False, reason=f"special token {token!r} has id {got}, the model's tokenizer.json says {want}")
        probe = PROBE_WORDS + " ".join(sorted(expected))
        want_ids = raw.encode(probe, add_special_tokens=False).ids
        got_ids = tok.encode(probe, add_special_tokens=False)
        if got_ids != want_ids:
            return dict(
                result, ok=False, reason=f"probe text encodes to {got_ids[:12]}..., the model's tokenizer.json gives {want_ids[:12]}..."
            )
        return dict(result, ok=True, reason=f"{len(expected)} special-token ids and {len(want_ids)} probe ids match tokenizer.json")
    unk = tok.unk_token_id
    for token in sorted(specials):
        got = tok.convert_tokens_to_ids(token)
        result["special_ids"][token] = got
        if got is None or (got == unk and token != tok.unk_token):
            return dict(result, ok=False, reason=f"special token {token!r} is not in the vocabulary")
    ids = tok.encode(PROBE_WORDS, add_special_tokens=False)
    if not ids:
        return dict(result, ok=False, reason="probe text encodes to nothing")
    return dict(result, ok=True, reason=f"loads as {type(tok).__name__}; {len(specials)} special tokens in the vocabulary")


def _jsonable(value, depth=0):
    """A config value as JSON: dtypes by name ("bfloat16" whether or not torch made it a
    torch.dtype), nested configs as dicts, anything else unknown as its text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < 8 and isinstance(value, (list, tuple)):
        return [_jsonable(item, depth + 1) for item in value]
    if depth < 8 and isinstance(value, dict):
        return {str(key): _jsonable(item, depth + 1) for key, item in value.items()}
    to_dict = getattr(value, "to_dict", None)
    if depth < 8 and callable(to_dict):
        return _jsonable(to_dict(), depth + 1)
    text = str(value)
    return text[len("torch.") :] if text.startswith("torch.") else text


def _describe(config, names):
    values = {}
    for name in names:
        try:
            value = getattr(config, name)
        except Exception:  # AttributeError, or a property that fails on this config: not there
            continue
        values[name] = _jsonable(value)
    return {"class": type(config).__name__, "model_type": getattr(config, "model_type", None), "attributes": values}


def _text_config(config):
    get = getattr(config, "get_text_config", None)  # 4.x before ~4.46 lacks it
    nested = get() if callable(get) else getattr(config, "text_config", None)
    return nested if nested is not None and nested is not config and not isinstance(nested, dict) else None


def _register_configs(model_types):
    """Register the image's config classes for `model_types`, as vllm_plugin/sitecustomize.py
    does in the engine's process (the plugin directory on sys.path: its top-level name)."""
    # This script's own path, not common.PLUGIN_DIR: a config check imports no runtime module
    # (RUNTIME_KINDS), so that it is made even where a foreign `common` shadows the package.
    plugin = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vllm_plugin")
    if plugin not in sys.path:
        sys.path.insert(0, plugin)
    import compat_configs

    compat_configs.register(model_types)


def check_config(request):
    from transformers import AutoConfig

    if request.get("register"):
        _register_configs([str(t) for t in request["register"]])
    names = [str(name) for name in request.get("attributes") or []]
    config = AutoConfig.from_pretrained(request["path"], trust_remote_code=bool(request.get("trust_remote_code")))
    result = _describe(config, names)
    nested = _text_config(config)
    if nested is not None:
        result["text_config"] = _describe(nested, names)
    return dict(result, ok=True, reason=f"reads as {result['class']} (model_type {result['model_type']!r})")


# Keys of a processor component that name classes or paths, not values the component keeps.
COMPONENT_NAME_KEYS = ("image_processor_type", "feature_extractor_type", "video_processor_type", "processor_class", "auto_map")


def _same(got, want):
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return abs(got - want) <= 1e-9 * max(1.0, abs(want))
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return all(_same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return set(got) == set(want) and all(_same(got[k], want[k]) for k in want)
    return got == want


def check_processor(request):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(request["path"], trust_remote_code=bool(request.get("trust_remote_code")))
    result = {"class": type(processor).__name__, "components": {}}
    want_class = request.get("processor_class")
    if want_class and result["class"] != want_class:
        return dict(result, ok=False, reason=f"AutoProcessor loads {result['class']}, not {want_class}")
    for name, values in sorted((request.get("components") or {}).items()):
        component = getattr(processor, name, None)
        if component is None:
            return dict(result, ok=False, reason=f"the processor has no {name}")
        result["components"][name] = type(component).__name__
        for key, want in sorted(values.items()):
            if key in COMPONENT_NAME_KEYS or not hasattr(component, key):
                continue
            got = _jsonable(getattr(component, key))
            if not _same(got, want):
                return dict(result, ok=False, reason=f"{name}.{key} loads as {got!r}, processor_config.json says {want!r}")
    parts = ", ".join(f"{k} {v}" for k, v in sorted(result["components"].items()))
    return dict(result, ok=True, reason=f"the processor loads as {result['class']}" + (f" ({parts})" if parts else ""))


def check_module(request):
    """Where an engine module's source is for this interpreter, found without importing it (a
    start-time engine patch, H1, is checked against the engine's file, not the caller's): the
    lookup is common/engine/patching.py's own."""
    from common.engine import patching

    top = str(request["name"]).split(".")[0]
    if patching.package_dir(top) is None:
        # A Python without the engine's package is not the engine's Python: the check could not
        # be made here, which says nothing of the engine's file ("unverified", not "fails").
        return {"ok": None, "reason": f"package {top!r} is not installed for {sys.executable}, so its file cannot be checked here"}
    try:
        source = patching.module_file(request["name"])
    except patching.PatchError as exc:
        return {"ok": False, "reason": str(exc)}
    return {"ok": True, "reason": f"{request['name']} is {source}", "path": source}


def check_layer_api(request):
    """Whether this interpreter's vLLM defines every symbol a backport calls, with the parameters
    it passes (read from its source; nothing is imported)."""
    from common.engine_checks import layer_api as probe

    root = probe.vllm_dir()
    if not root:
        return {"ok": None, "reason": "no vLLM is importable by this interpreter"}
    requires = request["requires"]
    found = probe.probe(root, requires)
    missing = []
    for symbol, params in sorted(requires.items()):
        name = symbol.split(":", 1)[1]
        missing.extend([name] if symbol not in found else [f"{name}({p})" for p in params if p not in found[symbol]])
    if missing:
        return {"ok": False, "reason": f"the engine's vLLM ({root}) lacks {', '.join(missing[:6])}", "missing": missing}
    return {"ok": True, "reason": f"the engine's vLLM ({root}) has the {len(requires)} layer APIs the backport calls", "missing": []}


def check_model_build(request):
    """The engine's model class built on the meta device (model_build.py: torch and vLLM; imported
    once per process, which keeps its distributed state)."""
    from common.engine_checks import model_build

    return model_build.build(request)


CHECKS = {
    "tokenizer": check_tokenizer,
    "config": check_config,
    "module": check_module,
    "processor": check_processor,
    "layer_api": check_layer_api,
    "model_build": check_model_build,
}


def torch_loaded():
    return sys.modules.get("torch") is not None  # None: hidden below, never imported


def hide_torch(requests):
    """transformers 5 probes torch with importlib.util.find_spec, which answers None for a
    module set to None in sys.modules: what it sees in a torch-less install."""
    if any(isinstance(r, dict) and (r.get("trust_remote_code") or r.get("kind") == "model_build") for r in requests):
        return  # the model's own code, or the engine's, imports torch for real
    try:
        from importlib.metadata import version

        major = int(version("transformers").split(".")[0])
    except Exception:  # no transformers (answered below), or a version string we cannot read
        return
    if major >= 5 and "torch" not in sys.modules:
        sys.modules["torch"] = None


def answer(index, request, version, unavailable="", foreign=""):
    kind = request.get("kind") if isinstance(request, dict) else None
    base = {"index": index, "kind": kind, "transformers": version}
    check = CHECKS.get(kind)
    if check is None:
        result = {"ok": False, "reason": f"unknown check kind {kind!r} (known: {', '.join(sorted(CHECKS))})"}
    elif foreign and kind in RUNTIME_KINDS:  # says nothing of the model: "unverified", naming why
        result = {"ok": None, "reason": f"cannot tell: {foreign}"}
    elif version is None and kind not in ("module", "layer_api"):  # they read no transformers
        result = {"ok": None, "reason": unavailable}
    else:
        try:
            result = check(request)
        except Exception as exc:  # the failure is the answer: the engine would fail the same way
            result = {"ok": False, "reason": f"{type(exc).__name__}: {exc}".strip()[:1000]}
    return dict(base, torch_loaded=torch_loaded(), **result)


def answer_all(requests, foreign=""):
    """Print one answer line per request, in order (`foreign`: why RUNTIME_KINDS cannot be
    checked here, foreign_common's answer)."""
    hide_torch(requests)
    version, unavailable = None, ""
    try:
        import transformers

        version = str(transformers.__version__)
    except Exception as exc:
        unavailable = f"transformers is not importable here ({type(exc).__name__}: {exc})"[:500]
    for index, request in enumerate(requests):
        emit(answer(index, request, version, unavailable, foreign))


def read_requests(argv):
    if len(argv) > 1:
        with open(argv[1], encoding="utf-8") as fh:
            data = json.load(fh)
    else:
        data = json.load(sys.stdin)
    if not isinstance(data, list):
        raise ValueError("requests must be a JSON list")
    return data


def emit(result):
    sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main(argv):
    # A short-lived process whose time is its imports (transformers, and for MB torch and vLLM:
    # several seconds, a hundred thousand objects or more): without the collector walking them
    # again at every threshold, doctor's model build over a folder takes seconds less (make bench:
    # doctor_models_per_s), and what the checks compute is the same.
    import gc

    gc.disable()
    if RUNTIME_ROOT not in sys.path:
        sys.path.append(RUNTIME_ROOT)
    foreign = foreign_common()
    if "--warm" in argv[1:]:
        argv = [a for a in argv if a != "--warm"]
        if not foreign:
            from common.engine_checks import model_build

            model_build.warm()
    try:
        requests = read_requests(argv)
    except (OSError, ValueError) as exc:
        emit({"index": None, "ok": False, "reason": f"unreadable requests ({exc})"})
        return 2
    answer_all(requests, foreign)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
