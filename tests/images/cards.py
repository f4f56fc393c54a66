"""What the tier expects of each card's image, derived from build_matrix.toml, the cards' own
folders and the committed profiles: a card added to the matrix is tested without a line here, and
where an expectation cannot be derived (a new engine generation) its test fails saying what to add.
"""

from __future__ import annotations

from typing import Dict, List, Set, Tuple

import pytest

from common.engine.profile import load_profile
from common.build_checks.selftest import clean_model as selftest_clean_model
from compat_build import manifest

MATRIX = manifest.load()


def entry(card: str) -> manifest.Card:
    return MATRIX.cards[card]


def clean_model(card: str) -> str:
    """The bundled model clean for the card's engine (saved by the transformers whose config keys it
    reads: BI-100's 4.55 reads `torch_dtype` only), as the self-test picks it from the profile."""
    return selftest_clean_model(load_profile(card))


def baked_differences(card: str) -> Dict[Tuple[str, ...], Tuple[object, object]]:
    """Where a baked profile may differ from the committed one (made by `make profiles` from the
    unpatched engine venvs), and why: L1 patches the image's transformers to read the list form."""
    reads = (load_profile(card).reads_extra_special_tokens_list, True)
    if "L1" in entry(card).build_patches and reads[0] is False:
        return {("engine", "reads", "extra_special_tokens_list"): reads}
    return {}


# What each image repairs in a model saved by transformers 5 (TokenizersBackend, a list of
# extra_special_tokens, rope_parameters): its own engine decides. hygon-k100's L1 taught its
# transformers the list form; transformers 5 (@next) reads all of it. A card not listed gets the
# answer of a listed card on the same engine with the same L1.
TRANSFORMERS5_REPAIRS: Dict[str, Set[str]] = {
    "hygon-k100": {"R3b", "R5"},
    "iluvatar-bi100": {"R3b", "R5"},
    "nv-a100": {"R3", "R3b", "R5"},
    "nv-a100@next": set(),
}


def _engine(card: str) -> Tuple[str, str, bool]:
    e = entry(card)
    return e.vllm, e.transformers, "L1" in e.build_patches


def transformers5_repairs(card: str) -> Set[str]:
    if card in TRANSFORMERS5_REPAIRS:
        return TRANSFORMERS5_REPAIRS[card]
    for known, repairs in TRANSFORMERS5_REPAIRS.items():
        if known in MATRIX.cards and _engine(known) == _engine(card):
            return repairs
    pytest.fail(
        f"{card}: no card on its engine {_engine(card)} in TRANSFORMERS5_REPAIRS: add what its image repairs in a transformers-5 model"
    )


def serving_cards() -> List[str]:
    """One card per engine generation (vLLM and transformers version): the one with the fewest
    build patches, so that a model served shows the engine, not a patch (nv-a100 for hygon-k100's
    engine too)."""
    chosen: Dict[Tuple[str, str], str] = {}
    for card in sorted(MATRIX.cards, key=lambda c: (len(entry(c).build_patches), c)):
        chosen.setdefault((entry(card).vllm, entry(card).transformers), card)
    return sorted(chosen.values())


def backport_cards(vllm: str) -> List[str]:
    """Every card whose engine is vLLM `vllm`: the cards the backports of that generation serve on
    (each image is its own build: hygon-k100's as well as nv-a100's)."""
    return sorted(card for card in MATRIX.cards if entry(card).vllm == vllm)


def vanilla_refusing_cards() -> List[str]:
    """The serving cards whose engine is older than transformers 5: vanilla refuses its tokenizer."""
    return [card for card in serving_cards() if int(entry(card).transformers.split(".")[0]) < 5]
