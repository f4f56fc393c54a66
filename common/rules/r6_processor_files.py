"""R6: the model's processor files are in transformers 5 form where the engine loads them.

vLLM (0.11 as 0.5.5) loads a multimodal model's processor from the model path, never from
`--tokenizer`, and transformers' processor loads its tokenizer from that same path. A processor
saved by transformers 5 is one nested `processor_config.json` ({"image_processor": {...},
"processor_class": ...}) with no `preprocessor_config.json`. transformers 4.56 and earlier
(BI-100's 4.55) lack the fallback to the nested file (`does not appear to have a file named
preprocessor_config.json`: seen with 4.55's own AutoProcessor; vLLM 0.5.5 loads the image
processor when it maps an image, not run here); 4.57 reads it. Whether the engine's transformers
does is a fact of its profile (`reads.nested_processor_config`, probed on the engine itself).
Where it does not, the repair is a model view with the legacy files written from the nested keys
(an image processor class named after a transformers-5 backend mapped to the name the old
transformers has), verified by the engine's transformers loading the processor from the view.
A transformers-5 tokenizer beside any processor (either form) is the routing's, not this rule's:
the tokenizer overlay's rewritten files are laid into the view too (common/start/model_view.py), since
on vLLM 0.11 a repaired `--tokenizer` alone still dies in the processor (`Failed to load the
processor`, caused by `Tokenizer class TokenizersBackend does not exist`).
"""

from __future__ import annotations

from ..model.processor_files import LEGACY_FILES, PROCESSOR_CONFIG, TYPE_KEYS, processor_check
from ..plan import Repair
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

# Class-name suffixes of transformers 5's image-processor backends that 4.x lacks, and what the
# same class is called there: v5's `CLIPImageProcessorPil` is 4.x's (slow, PIL) `CLIPImageProcessor`.
# transformers 5.24 strips "Pil" itself when it saves; a file written otherwise may still hold it.
CLASS_SUFFIXES = (("Pil", ""),)


def legacy_class(name: str) -> str:
    """The class name transformers 4.x knows for a transformers-5 backend class name."""
    for suffix, replacement in CLASS_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)] + replacement
    return name


def legacy_files(nested: Dict[str, Any], present: List[str], problems: List[str]) -> Dict[str, Dict[str, Any]]:
    """The legacy files (name -> content) the nested processor_config.json stands for, leaving
    out those the model already has; each nested value that is not a JSON object is described in
    `problems` instead."""
    files: Dict[str, Dict[str, Any]] = {}
    for key, name in sorted(LEGACY_FILES.items()):
        if key not in nested:
            continue
        value = nested[key]
        if not isinstance(value, dict):
            problems.append(f"{PROCESSOR_CONFIG}'s {key} is a JSON {type(value).__name__}, not an object")
            continue
        if name in present or name in files:
            continue
        content = dict(value)
        type_key = TYPE_KEYS[key]
        if isinstance(content.get(type_key), str):
            content[type_key] = legacy_class(content[type_key])
        files[name] = content
    return files


class ProcessorFiles(Rule):
    code = "R6"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        if not ctx.model.state(PROCESSOR_CONFIG).exists:
            return outcome
        nested = ctx.model.json_object(PROCESSOR_CONFIG)  # unreadable: an INPUT finding says why
        if not nested or not any(key in nested for key in LEGACY_FILES):
            return outcome  # transformers 4.x form (processor kwargs only), or nothing usable
        problems: List[str] = []
        files = legacy_files(nested, [n for n in LEGACY_FILES.values() if ctx.model.state(n).exists], problems)
        for why in problems:
            outcome.findings.append(self.finding("warning", f"{why}; not written as a legacy file"))
        if not files:
            return outcome  # nothing to write: a tokenizer to repair reaches the processor by the routing
        nested_read = self._reads_nested(ctx)
        if nested_read:
            return outcome  # the engine reads the processor where it is, as it is
        if nested_read is None:
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"the processor is saved in transformers 5 form (nested {PROCESSOR_CONFIG}, no "
                    f"{', '.join(sorted(files))}); this profile does not say whether transformers "
                    f"{ctx.profile.transformers_version} reads that form (4.56 and earlier do not)",
                )
            )
            return outcome
        repair = Repair(
            self.code,
            self.title,
            f"vLLM {ctx.profile.vllm_version} loads the processor from the model path, and transformers "
            f"{ctx.profile.transformers_version} does not read the nested {PROCESSOR_CONFIG}: writing "
            f"{', '.join(sorted(files))} from it (left with the processor's own arguments)",
        )
        # 4.x's processor_config.json holds the processor's own arguments only: 4.55 passes a
        # nested image_processor dict on as an argument and fails ("Received a dict for argument
        # image_processor"). The nested keys live in the legacy files now.
        files[PROCESSOR_CONFIG] = {k: v for k, v in nested.items() if k not in LEGACY_FILES}
        repair.view_files = files
        repair.processor_check = processor_check(ctx.model)
        outcome.repairs.append(repair)
        return outcome

    @staticmethod
    def _reads_nested(ctx: Context) -> Optional[bool]:
        """Whether the engine's transformers reads the nested processor_config.json: the profile's
        fact; a profile made before it was recorded says it through an engine whose transformers
        reads transformers 5's config and tokenizer forms (a transformers 5, which writes the
        nested form itself). Else None: unknown."""
        if ctx.profile.reads_nested_processor_config is not None:
            return ctx.profile.reads_nested_processor_config
        if ctx.profile.reads_rope_parameters and ctx.profile.reads_extra_special_tokens_list:
            return True
        return None


RULE = ProcessorFiles()
