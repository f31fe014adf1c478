"""Speculative methods (pure): the vocabulary of ``spec.speculation.method`` and what each method needs.

One place for the method names, which of them need a drafter, which knobs apply to which method, and
specdeploy's defaults for the knobs an engine requires but does not default itself. What each *engine
release* calls a method and which flags it takes is in the capability table (``engines.py``
``EngineRelease.method_names``), read from the releases' own code and recorded in the engine facts
(``data/facts/*.json`` ``methods``). Which rules each family's drafter must pass is the checker's
(``checker.check_method``).
"""

from __future__ import annotations

from types import MappingProxyType

# Every method the API accepts, in the order the docs list them.
METHODS: tuple[str, ...] = (
    "dflash", "dflash2", "dspark", "eagle3", "eagle", "mtp", "ngram", "suffix", "draft_model", "ddtree",
)
DEFAULT_METHOD = "dflash"

# The target serves as its own drafter (MTP layers) or no model drafts (lookup): spec.drafter is refused.
DRAFTERLESS: frozenset[str] = frozenset({"mtp", "ngram", "suffix"})
# Methods run through the DFlash checker path (core/checker/layers.py, window.py): the drafter is a DFlash
# block drafter (DFlash2 is DFlash with extra fields, selected by architecture in both engines).
DFLASH_PATH: frozenset[str] = frozenset({"dflash", "dflash2", "ddtree"})
# Block drafters: spec.speculation.blockSize (tokens per step, bonus included) applies.
BLOCK_METHODS: frozenset[str] = frozenset({"dflash", "dflash2", "dspark", "ddtree"})
# Methods with a compact draft cache window (spec.speculation.draftWindow).
WINDOW_METHODS: frozenset[str] = frozenset({"dflash", "dflash2", "ddtree"})
# Knob objects of spec.speculation and the methods each applies to.
EAGLE_METHODS: frozenset[str] = frozenset({"eagle3", "eagle", "draft_model"})
MTP_METHODS: frozenset[str] = frozenset({"mtp"})
NGRAM_METHODS: frozenset[str] = frozenset({"ngram"})
KNOB_METHODS = MappingProxyType({"eagle": EAGLE_METHODS, "mtp": MTP_METHODS, "ngram": NGRAM_METHODS})

# Not in any engine release: the checker and the renderer refuse them and say where they stand.
DDTREE_PULLS = "sgl-project/sglang PR #29907 (open), liranringel/ddtree; no vLLM pull request yet"
REFUSED = MappingProxyType({"ddtree": DDTREE_PULLS})

# Family of the drafter each method serves (family detection compares the drafter's own family with it).
FAMILY = MappingProxyType({
    "dflash": "dflash", "dflash2": "dflash2", "ddtree": "dflash", "dspark": "dspark", "eagle3": "eagle3",
    "eagle": "eagle", "draft_model": "draft_model", "mtp": "mtp", "ngram": "ngram", "suffix": "suffix",
})

# specdeploy's defaults where an engine requires a value (vLLM: num_speculative_tokens is required for
# eagle/eagle3/ngram/draft_model, config/speculative.py SpeculativeConfig.__post_init__) or chooses one by
# model (SGLang _auto_choose_speculative_params): rendered explicitly so both engines run the same plan.
DEFAULT_STEPS = 3  # SGLang's own default (3 steps, top-k 1, 4 draft tokens) for non-Llama targets
DEFAULT_TOPK = 1
DEFAULT_NGRAM_TOKENS = 5  # vLLM docs' n-gram example (num_speculative_tokens 5)
DEFAULT_SUFFIX_TOKENS = 24  # vLLM: K defaults to suffix_decoding_max_tree_depth (24)


def needs_drafter(method: str) -> bool:
    return method not in DRAFTERLESS


def uses_dflash_path(method: str) -> bool:
    return method in DFLASH_PATH


def knob_methods(knob: str) -> frozenset[str]:
    return KNOB_METHODS[knob]


def method_list(methods) -> str:
    return ", ".join(m for m in METHODS if m in set(methods))
