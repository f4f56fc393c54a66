"""Which tokenizer a model ships, read from file names and tokenizer_config.json only."""

from __future__ import annotations


from .modeldir import ModelDir

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# (kind, files that must all be usable), first match wins: the engine's transformers prefers
# tokenizer.json over every slow format.
KIND_FILES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("fast", ("tokenizer.json",)),
    ("sentencepiece", ("tokenizer.model",)),
    ("bpe", ("vocab.json", "merges.txt")),
    ("wordpiece", ("vocab.txt",)),
)
TIKTOKEN_NAMES = ("tiktoken.model", "qwen.tiktoken")
TIKTOKEN_SUFFIX = ".tiktoken"
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def tokenizer_kind(model: ModelDir) -> str:
    """fast | sentencepiece | bpe | wordpiece | tiktoken | none."""
    for kind, files in KIND_FILES:
        if all(model.has(name) for name in files):
            return kind
    for name in model.names():
        if name in TIKTOKEN_NAMES or name.endswith(TIKTOKEN_SUFFIX):
            if model.has(name):
                return "tiktoken"
    return "none"


def tokenizer_config(model: ModelDir) -> Dict[str, Any]:
    return model.json_object("tokenizer_config.json")


def remote_code_tokenizer(model: ModelDir) -> Optional[str]:
    """The auto_map entry that makes this a remote-code tokenizer, or None."""
    for name in ("tokenizer_config.json", "config.json"):
        auto_map = model.json_object(name).get("auto_map")
        if isinstance(auto_map, dict) and "AutoTokenizer" in auto_map:
            return f"{name} auto_map.AutoTokenizer = {auto_map['AutoTokenizer']!r}"
    return None


def chat_template_source(model: ModelDir) -> Optional[str]:
    """Where the engine's transformers would find a chat template, or None."""
    for name in CHAT_TEMPLATE_FILES:
        if model.has(name):
            return name
    template = tokenizer_config(model).get("chat_template")
    if isinstance(template, str) and template.strip():
        return "tokenizer_config.json"
    if isinstance(template, list) and any(isinstance(t, dict) and isinstance(t.get("template"), str) for t in template):
        return "tokenizer_config.json"
    return None


def token_text(value: Any) -> Optional[str]:
    """The text of a special token as configs store it: a string or a serialized AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def special_token_strings(values: List[Any]) -> List[str]:
    """Token strings from a list that may hold strings or serialized AddedToken dicts."""
    return [text for text in map(token_text, values) if text is not None]


def token_for_id(tokenizer_json: Dict[str, Any], token_id: Any) -> Optional[str]:
    """The text tokenizer.json gives `token_id`: an added token first (where special tokens
    live), then the model's vocabulary (a {token: id} map for BPE/WordPiece/WordLevel, a list of
    [piece, score] for Unigram). None when the id is not an integer or not there."""
    if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
        return None
    added_tokens = tokenizer_json.get("added_tokens")
    for added in added_tokens if isinstance(added_tokens, list) else []:
        if isinstance(added, dict) and added.get("id") == token_id and isinstance(added.get("content"), str):
            return added["content"]
    model = tokenizer_json.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        for text, value in vocab.items():
            if value == token_id and not isinstance(value, bool):
                return text
    elif isinstance(vocab, list) and token_id < len(vocab):
        entry = vocab[token_id]
        if isinstance(entry, list) and entry and isinstance(entry[0], str):
            return entry[0]
    return None
