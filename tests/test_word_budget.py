"""Less to read: a step shows at most 1.2 times the words the seed lesson's same step shows, in both languages.

The seed's counts come from ``seeds/002_0af15d8ff55df5b7.txt`` (the six-step lesson as a visitor's page showed
it, in Indonesian): a step is its section from "Langkah n dari 6" to the next one (the last ends where the
overview begins, "Apa itu mixed precision training?"), and a word is a run of non-space characters with a
letter or a digit in it, the rule :func:`tests.visible_words.count` applies to the app. The seed's text of
each step includes its chart's labels, run together as the file holds them; the app's count leaves a chart's
own text out (see tests/visible_words.py for what it counts).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from lensa.ui import i18n
from lensa.ui.site import STEPS
from tests import visible_words
from tests.pagetools import open_page

SEED = "002_0af15d8ff55df5b7.txt"
# Words per step of the seed lesson (rule above), by our step key: the seed's step n is our step n.
SEED_WORDS = {"memory": 215, "fp16_range": 153, "loss_scaling": 188, "master_weights": 176, "bf16": 175, "speed": 190}
MAX_RATIO = 1.2


def seed_words(text: str) -> dict[int, int]:
    """The seed's words per step number, counted as the module's docstring says."""
    text = text[: text.index("Apa itu mixed precision training?")]
    sections = re.split(r"\n(?=Langkah \d dari 6)", text)[1:]
    return {int(s.split()[1]): visible_words.count(s) for s in sections}


def _seed_file() -> Path | None:
    for root in (Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")):
        if (root / "seeds" / SEED).exists():
            return root / "seeds" / SEED
    return None


def test_the_table_is_the_seeds_count():
    path = _seed_file()
    if path is None:
        pytest.skip(f"the seed file {SEED} is not on this machine; the table above holds its counts")
    counted = seed_words(path.read_text(encoding="utf-8"))
    assert counted == {s.step: SEED_WORDS[s.key] for s in STEPS}


def test_the_seed_rule_counts_words_not_marks():
    assert visible_words.count("Rentang sempit fp16 · 4,3% → 2^−14 = 6,1e-5 —") == 6
    assert visible_words.count("[subnormal](glossary?lang=id&term=subnormal) **tebal**") == 2


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize("key", [s.key for s in STEPS])
def test_a_step_shows_at_most_its_share_of_the_seeds_words(key, lang):
    at = open_page(key, lang=lang)
    assert not at.exception
    shown = visible_words.shown_words(at)
    limit = math.floor(MAX_RATIO * SEED_WORDS[key])
    assert shown <= limit, f"{key} ({lang}) shows {shown} words, more than {limit} (1.2 × the seed's {SEED_WORDS[key]})"
    assert shown > SEED_WORDS[key] / 2  # the count reads the page (a broken walk would count next to nothing)


def test_the_count_leaves_closed_sections_out_and_fails_on_what_it_cannot_read():
    at = open_page("fp16_range", lang="en")
    notes = i18n.text("en", "common.notes")
    shown = list(visible_words.texts(at.main))
    assert notes in shown  # an expander's label is on screen
    assert not any("exponent bits with a bias" in t for t in shown)  # its notes are not
    from streamlit.testing.v1.element_tree import UnknownElement

    class Strange(UnknownElement):
        def __init__(self) -> None:
            self.type = "mystery_widget"
            self.proto = None

    with pytest.raises(AssertionError, match="does not know"):
        list(visible_words.texts(Strange()))


def test_a_component_is_counted_through_the_data_it_is_sent():
    from streamlit.proto.BidiComponent_pb2 import BidiComponent
    from streamlit.testing.v1.element_tree import UnknownElement

    class Component(UnknownElement):
        def __init__(self, proto: BidiComponent) -> None:
            self.type, self.proto = "bidi_component", proto

    sent = BidiComponent(component_name="lensa.step", json='{"cards": [["Rounded to 0", "4.3%"]], "try": "Drag it."}')
    with pytest.raises(AssertionError, match="cannot read"):
        list(visible_words.texts(Component(sent)))
    visible_words.COMPONENT_TEXT["lensa.step"] = lambda data: [
        *(w for card in data["cards"] for w in card),
        data["try"],
    ]
    try:
        assert sum(visible_words.count(t) for t in visible_words.texts(Component(sent))) == 6
    finally:
        del visible_words.COMPONENT_TEXT["lensa.step"]


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_scrubs_words_are_counted(lang):
    """A step's slider, cards and "Try this" are drawn by its scrub component: they count as the page's words."""
    at = open_page("fp16_range", lang=lang)
    shown = list(visible_words.texts(at.main))
    assert i18n.text(lang, "fp16_range.try") in shown and i18n.text(lang, "common.try_this") in shown
    assert i18n.text(lang, "fp16_range.grad") in shown  # the slider's label
    assert i18n.text(lang, "fp16_range.metric_zero") in shown  # a card's label
