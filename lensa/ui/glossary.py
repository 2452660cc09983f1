"""The glossary's terms, as data: each term's key and the page that first uses it.

A term's name and definition are catalogue texts (``glossary.term_<key>``, ``glossary.def_<key>``, both
languages). A catalogue text links a term by writing ``[word](glossary:<key>)``; :func:`lensa.ui.i18n.catalogue`
turns that into a link to the glossary page's entry in the text's own language (``/glossary?lang=id&term=<key>``).
The page named as a term's first user links it in its own text (``tests/test_glossary.py`` checks both
languages), so a learner meets the definition one click from where the word first appears.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    key: str  # the catalogue's glossary.term_<key> and def_<key>, and ?term=<key>
    first: str  # the key of the page (lensa.ui.site.PAGES) whose text first uses it and links it


# In the order a learner meets them: the steps' order, then the pages beyond the lesson.
TERMS: tuple[Term, ...] = (
    Term("mixed_precision", "memory"),
    Term("fp32", "memory"),
    Term("fp16", "memory"),
    Term("model_states", "memory"),
    Term("optimizer_states", "memory"),
    Term("activations", "memory"),
    Term("zero", "memory"),
    Term("activation_checkpointing", "memory"),
    Term("floating_point", "fp16_range"),
    Term("exponent", "fp16_range"),
    Term("significand", "fp16_range"),
    Term("dynamic_range", "fp16_range"),
    Term("subnormal", "fp16_range"),
    Term("underflow", "fp16_range"),
    Term("overflow", "fp16_range"),
    Term("loss_scale", "loss_scaling"),
    Term("gradscaler", "loss_scaling"),
    Term("rounding", "master_weights"),
    Term("spacing", "master_weights"),
    Term("master_weights", "master_weights"),
    Term("bf16", "bf16"),
    Term("tensor_core", "speed"),
    Term("flops", "speed"),
    Term("mfu", "speed"),
    Term("tf32", "speed"),
    Term("autocast", "speed"),
    Term("fp8", "speed"),
    Term("block_scaling", "blocks"),
)
TERM_KEYS = tuple(t.key for t in TERMS)
# The term whose first page also explains, in a closed section, how a float is stored (lensa.ui.layout).
PRIMER_TERM = "floating_point"


def first_page(term: str) -> str:
    """The key of the page that first uses ``term``."""
    return next(t.first for t in TERMS if t.key == term)
