"""Does a tokenizer overlay load in this Python's transformers, with the model's own ids?

usage: python tokenizer_check.py OVERLAY_DIR MODEL_DIR
Prints one JSON line: {"ok": bool, "reason": str, "class": str, "special_ids": {token: id}}.
Run under the engine's interpreter; standalone on purpose (no import of the runtime package).

The reference is the model's own tokenizer.json read by `tokenizers` directly: every special
token there and in the rewritten config must keep its id, and a probe text mixing words,
digits, non-ASCII and special tokens must encode to the same ids.
"""

import json
import os
import sys

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


def check(overlay, model_dir):
    from transformers import AutoTokenizer

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
            return dict(result, ok=False, reason=f"probe text encodes to {got_ids[:12]}..., the model's tokenizer.json gives {want_ids[:12]}...")
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


def main():
    if len(sys.argv) != 3:
        print(json.dumps({"ok": False, "reason": "usage: tokenizer_check.py OVERLAY_DIR MODEL_DIR"}))
        return 2
    try:
        import transformers  # noqa: F401
    except Exception as exc:
        print(json.dumps({"ok": None, "reason": f"transformers is not importable here ({exc})"}))
        return 0
    try:
        result = check(sys.argv[1], sys.argv[2])
    except Exception as exc:
        result = {"ok": False, "reason": f"{type(exc).__name__}: {exc}".strip()[:500]}
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
