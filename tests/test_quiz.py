"""Predict, then reveal: every step asks before it explains, hides each answer until the learner commits, keeps
the answers for the session, and marks the steps whose questions are answered; the questions themselves are fair
(options of similar length) and testable (the control values they name are ones the step's controls reach, and
the right answer is what the core computes there)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1.element_tree import Block

from lensa.models.configs import DEFAULT_PRESET, PRESETS
from lensa.models.gradients import gradient_sample
from lensa.models.master import update_outcome
from lensa.models.memory import bytes_per_param, training_memory
from lensa.models.scaling import static_shift_shares
from lensa.numerics.formats import category_shares, mean_relative_error
from lensa.ui import i18n, progress, quiz
from lensa.ui.frame import DONE_MARK
from lensa.ui.site import PAGES_BY_KEY, STEPS, NumberControl
from tests.pagetools import notices, open_page, page_keys, scrub_data, scrub_elements, sidebar_links

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

STEP_KEYS = [s.key for s in STEPS]


def _quiz_box(at) -> tuple[Block, Block]:
    """(the questions' container, its parent) in the main area."""

    def find(node: Block) -> tuple[Block, Block] | None:
        for child in node.children.values():
            if isinstance(child, Block):
                if child.proto is not None and str(getattr(child.proto, "id", "")).endswith("-lensa-quiz"):
                    return child, node
                if (found := find(child)) is not None:
                    return found
        return None

    found = find(at.main)
    assert found is not None, "no questions on the page"
    return found


def _quiz_radios(at, key: str):
    return [r for r in at.radio if r.key and r.key.startswith(f"quiz.{key}.")]


def _texts(at) -> str:
    parts = [e.value for kind in ("markdown", "success", "warning", "info", "caption") for e in at.get(kind)]
    return "\n".join(str(p) for p in parts)


@pytest.mark.parametrize("key", STEP_KEYS)
def test_each_step_asks_its_first_question_before_the_explanation(key):
    at = open_page(key, lang="en")
    assert not at.exception
    box, parent = _quiz_box(at)
    siblings = list(parent.children.values())
    after = siblings[siblings.index(box) + 1]
    assert after.type == "markdown" and len(after.value) > 80  # the explanation paragraph follows the questions
    radios = _quiz_radios(at, key)
    first = progress.questions(key)[0]
    assert [r.label for r in radios] == [i18n.text("en", f"quiz.{first}")]  # one question at a time
    assert radios[0].value is None
    assert i18n.text("en", f"quiz.{first}_why") not in _texts(at)  # the answer waits for the learner


@pytest.mark.parametrize("key", STEP_KEYS)
def test_an_answer_reveals_why_and_then_the_next_question(key):
    at = open_page(key, lang="id")
    ids = progress.questions(key)
    right = i18n.answers()[ids[0]]
    wrong = next(letter for letter in "abc" if letter != right)
    at.radio(key=f"quiz.{key}.1").set_value(wrong).run()
    assert any(
        w.value.startswith("**Belum tepat.**") and i18n.text("id", f"quiz.{ids[0]}_why") in w.value for w in at.warning
    )
    assert len(_quiz_radios(at, key)) == min(2, len(ids))  # the next question appears once this one is answered
    at.radio(key=f"quiz.{key}.1").set_value(right).run()
    assert any(
        s.value.startswith("**Benar.**") and i18n.text("id", f"quiz.{ids[0]}_why") in s.value for s in at.success
    )


def _answer_all(at, key: str, letter_of=lambda q: i18n.answers()[q]) -> None:
    for n, question in enumerate(progress.questions(key), start=1):
        at.radio(key=f"quiz.{key}.{n}").set_value(letter_of(question)).run()


def _nav_label(at, key: str) -> str:
    step = PAGES_BY_KEY[key].step
    return next(label.strip("*") for label in sidebar_links(at) if label.strip("*").startswith(f"{step} · "))


def test_answers_outlive_page_and_language_switches_and_the_navigation_marks_the_step():
    at = open_page("fp16_range", lang="en")
    assert not _nav_label(at, "fp16_range").endswith(DONE_MARK)
    wrong_first = {q: ("b" if i18n.answers()[q] != "b" else "c") for q in progress.questions("fp16_range")[:1]}
    _answer_all(at, "fp16_range", lambda q: wrong_first.get(q, i18n.answers()[q]))
    assert _nav_label(at, "fp16_range").endswith(DONE_MARK)  # drawn by the lesson fragment, on the answer's own run
    at.switch_page(PAGES_BY_KEY["loss_scaling"].file)
    at.run()
    assert _nav_label(at, "fp16_range").endswith(DONE_MARK)
    assert not _nav_label(at, "loss_scaling").endswith(DONE_MARK)
    progress_line = i18n.text("en", "nav.progress", mark=DONE_MARK, done=1, total=len(STEPS))
    assert progress_line in [c.value for c in at.sidebar.caption]
    at.switch_page(PAGES_BY_KEY["fp16_range"].file)
    at.run()
    radios = _quiz_radios(at, "fp16_range")
    ids = progress.questions("fp16_range")
    assert [r.value for r in radios] == [wrong_first.get(q, i18n.answers()[q]) for q in ids]
    assert any(w.value.startswith("**Not quite.**") for w in at.warning)
    at.query_params["lang"] = "id"
    at.run()
    assert [r.value for r in _quiz_radios(at, "fp16_range")] == [r.value for r in radios]
    assert _nav_label(at, "fp16_range").endswith(DONE_MARK)
    assert i18n.text("id", "nav.progress", mark=DONE_MARK, done=1, total=len(STEPS)) in [
        c.value for c in at.sidebar.caption
    ]


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_navigation_marks_only_the_steps_whose_questions_are_all_answered(lang):
    at = open_page("master_weights", lang=lang)
    at.radio(key="quiz.master_weights.1").set_value("a").run()  # one of three: not done
    assert not any(label.endswith(DONE_MARK) for label in sidebar_links(at))
    _answer_all(at, "master_weights")
    marked = [label.strip("*") for label in sidebar_links(at) if label.endswith(DONE_MARK) or DONE_MARK in label]
    assert marked == [f"4 · {i18n.text(lang, 'nav.master_weights')} {DONE_MARK}"]


# --- the questions themselves -----------------------------------------------------------------------------

MAX_LENGTH_RATIO = 1.5  # longest option ÷ shortest, in characters, in each question and language


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_options_are_of_similar_length_and_the_right_one_is_not_the_longest_as_a_rule(lang):
    right_longest = []
    for question, right in i18n.answers().items():
        lengths = {letter: len(i18n.text(lang, f"quiz.{question}_{letter}")) for letter in "abc"}
        assert max(lengths.values()) <= MAX_LENGTH_RATIO * min(lengths.values()), (question, lengths)
        if lengths[right] > max(n for letter, n in lengths.items() if letter != right):
            right_longest.append(question)
    assert len(right_longest) <= len(i18n.answers()) // 3, right_longest


def test_the_length_check_catches_a_giveaway():
    lengths = {"a": 12, "b": 15, "c": 40}
    assert max(lengths.values()) > MAX_LENGTH_RATIO * min(lengths.values())


# Every control value a question names: (question, control, value, how the question writes it per language).
NAMED_VALUES = [
    ("memory_q1", "precision", "fp32", {"en": "FP32", "id": "FP32"}),
    ("memory_q1", "precision", "mixed", {"en": "mixed precision", "id": "mixed precision"}),
    ("memory_q2", "zero", 3, {"en": "stage 3", "id": "stage 3"}),
    ("memory_q2", "gpus", 8, {"en": "8 GPUs", "id": "8 GPU"}),
    ("fp16_range_q1", "grad", 1e-8, {"en": "1e-8", "id": "1e-8"}),
    ("fp16_range_q2", "grad", 1e-7, {"en": "1e-7", "id": "1e-7"}),
    ("loss_scaling_q1", "scale", 0, {"en": "2^0", "id": "2^0"}),
    ("loss_scaling_q1", "scale", 8, {"en": "2^8", "id": "2^8"}),
    ("master_weights_q1", "w", 1.0, {"en": "to 1", "id": "ke 1"}),
    ("master_weights_q1", "update", 1e-4, {"en": "1e-4", "id": "1e-4"}),
    ("master_weights_q1", "update", 3e-4, {"en": "3e-4", "id": "3e-4"}),
    ("master_weights_q1", "update", 5e-4, {"en": "5e-4", "id": "5e-4"}),
    ("master_weights_q3", "w", 1.0, {"en": "w = 1", "id": "w = 1"}),
    ("master_weights_q3", "update", 1e-7, {"en": "1e-7", "id": "1e-7"}),
    ("bf16_q1", "grad", 1e-10, {"en": "1e-10", "id": "1e-10"}),
    ("bf16_q2", "grad", 1e-2, {"en": "0.01", "id": "0,01"}),
    ("blocks_q1", "outlier", 8.0, {"en": "2^8", "id": "2^8"}),
]


@pytest.mark.parametrize(("question", "control", "value", "written"), NAMED_VALUES)
def test_a_value_a_question_names_is_one_its_controls_reach(question, control, value, written):
    page = question.rsplit("_q", 1)[0]
    declared = PAGES_BY_KEY[page].control(control)
    positions = declared.stops if isinstance(declared, NumberControl) else declared.options  # type: ignore[attr-defined]
    assert value in positions, f"{question} names {control} = {value}, which is not a stop of {page}'s control"
    for lang in i18n.LANGUAGES:
        text = " ".join(i18n.text(lang, f"quiz.{question}{part}") for part in ("", "_a", "_b", "_c"))
        assert written[lang] in text, (question, lang)
    # and a link to it opens the page there, with no "outside the range" or "not a stop" notice
    at = open_page(page, lang="en", **{control: str(value)})
    assert not at.exception and notices(at) == []


def test_the_reachability_check_knows_an_unreachable_value():
    # The old step 4 question asked about 4e-4 and 6e-4, between the update control's stops.
    stops = PAGES_BY_KEY["master_weights"].control("update").stops  # type: ignore[attr-defined]
    assert 4e-4 not in stops and 6e-4 not in stops and 5e-4 in stops


def _right(question: str) -> str:
    return i18n.answers()[question]


def test_right_answers_are_what_the_core_computes_at_the_named_states():
    model = PRESETS[DEFAULT_PRESET].shape()
    # memory_q1: both precisions cost 16 bytes a parameter of model states
    assert bytes_per_param("mixed") == bytes_per_param("fp32") == 16 and _right("memory_q1") == "a"
    # memory_q2: ZeRO-3 over 8 GPUs divides the model states, not the activations
    alone, split = training_memory(model, 2048), training_memory(model, 2048, zero_stage=3, gpus=8)
    assert split.activations == alone.activations and split.model_states < alone.model_states
    assert _right("memory_q2") == "c"
    # fp16_range_q1: at 1e-8 most of the sample rounds to 0 (a), not subnormal (b) or normal (c)
    shares = category_shares(gradient_sample(1e-8), "fp16")
    most = max(("zero", "subnormal", "normal"), key=shares.__getitem__)
    assert {"zero": "a", "subnormal": "b", "normal": "c"}[most] == _right("fp16_range_q1")
    assert shares["normal"] == 0  # the why says: not one is a normal FP16 number
    # loss_scaling_q1: none rounds to 0 at 2^8, some did at 2^0, and none overflows
    at_8, at_0 = static_shift_shares(gradient_sample(1e-6), 8), static_shift_shares(gradient_sample(1e-6), 0)
    assert at_8["zero"] == 0 < at_0["zero"] and at_8["overflow"] == 0 and _right("loss_scaling_q1") == "b"
    # master_weights_q1: of 1e-4, 3e-4 and 5e-4 only the last changes an FP16 weight of 1
    kept = [update_outcome(1.0, u, "fp16").kind != "lost" for u in (1e-4, 3e-4, 5e-4)]
    assert kept == [False, False, True] and _right("master_weights_q1") == "c"
    # bf16_q1: at 1e-10 BF16 rounds none to 0, FP16 nearly all
    sample = gradient_sample(1e-10)
    assert category_shares(sample, "bf16")["zero"] == 0 and category_shares(sample, "fp16")["zero"] > 0.9
    assert _right("bf16_q1") == "c"
    # bf16_q2: at 0.01 FP16's mean relative error is the smaller
    sample = gradient_sample(1e-2)
    assert mean_relative_error(sample, "fp16") < mean_relative_error(sample, "bf16") and _right("bf16_q2") == "b"


# --- a question asks for a move only where the page shows the control ------------------------------------------

# Questions that name a control's value without asking the learner to move it ("a gradient near 1e-7").
NAMES_WITHOUT_MOVING = {"fp16_range_q2"}
MOVE_WORDS = ("slide", "set", "raise", "switch", "open", "keep", "drag", "pick", "move", "now slide")


def test_moves_lists_the_controls_each_question_asks_to_move():
    named: dict[str, set[str]] = {}
    for question, control, _, _ in NAMED_VALUES:
        named.setdefault(question, set()).add(control)
    for question in i18n.answers():
        text = i18n.text("en", f"quiz.{question}").lower()
        asks_a_move = text.startswith(MOVE_WORDS)
        assert asks_a_move == (question in quiz.MOVES), (question, text)
        if question in quiz.MOVES:
            assert set(quiz.MOVES[question]) == named[question], question
        else:
            assert question not in named or question in NAMES_WITHOUT_MOVING, question


def _controls_on_page(at, key: str) -> set[str]:
    """The controls the page draws, as the browser gets them: its widgets (keys ``w.<page>.<name>``) and its scrub
    sliders (the parts the server sends)."""
    found = {part["name"] for element in scrub_elements(at) for part in scrub_data(element)["parts"]}

    def walk(node) -> None:
        widget = getattr(node, "key", None)
        if isinstance(widget, str) and widget.startswith(f"w.{key}."):
            found.add(widget.removeprefix(f"w.{key}."))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return found - {"scrub"}


def _asked_questions(at, key: str) -> list[str]:
    """Every question the page asks, answering each in turn so the next appears (right answers: no hint needed)."""
    by_label = {i18n.text("en", f"quiz.{q}"): q for q in progress.questions(key)}
    while True:
        radios = _quiz_radios(at, key)
        open_ones = [r for r in radios if r.value is None]
        if not open_ones:
            return [by_label[r.label] for r in radios]
        question = by_label[open_ones[0].label]
        open_ones[0].set_value(i18n.answers()[question]).run()
        assert not at.exception, at.exception


DATA_PAGES = page_keys(control="data")


@pytest.mark.parametrize(
    ("key", "data"),
    [
        (key, data)
        for key in (*STEP_KEYS, *(k for k in DATA_PAGES if k not in STEP_KEYS))
        for data in ("illustration", "reference", "lab", "upload")
        if key in DATA_PAGES or data == "illustration"
    ],
)
def test_every_question_asked_names_only_controls_on_the_page(key, data):
    from tests.test_measured_pages import LAB, upload, visit

    at = visit(key, "en", LAB if data == "lab" else None, **({} if key not in DATA_PAGES else {"data": data}))
    if data == "upload":
        upload(at)
    assert not at.exception, at.exception
    on_page = _controls_on_page(at, key)
    asked = _asked_questions(at, key)
    for question in asked:
        missing = set(quiz.MOVES.get(question, ())) - on_page
        assert not missing, f"{key} with data={data} asks {question}, which moves {missing}, not on the page"
    # and no question is held back whose controls are there
    assert asked == [q for q in progress.questions(key) if set(quiz.MOVES.get(q, ())) <= on_page]
    if data == "illustration":
        assert asked == progress.questions(key)


# Where a question sends the learner: the words for "above" and "below" in each language.
DIRECTIONS = {"en": ("above", "below"), "id": ("di atas", "di bawah")}


@pytest.mark.parametrize("lang", ["en", "id"])
def test_step1_question_2_names_the_setup_where_it_is(lang):
    at = open_page("memory", lang=lang)
    at.radio(key="quiz.memory.1").set_value(i18n.answers()["memory_q1"]).run()
    question = i18n.text(lang, "quiz.memory_q2")
    title = i18n.text(lang, "memory.setup_title")
    order: list[str] = []  # the setup's expander and the question's radio, in page order

    def walk(node) -> None:
        for child in node.children.values():
            if getattr(child, "type", None) == "expander" and child.label == title:
                order.append("setup")
            elif getattr(child, "type", None) == "radio" and child.label == question:
                order.append("question")
            if isinstance(child, Block):
                walk(child)

    walk(at.main)
    assert sorted(order) == ["question", "setup"]
    above, below = DIRECTIONS[lang]
    assert title.split(":")[0] in question  # named as its expander is, so the learner finds it
    assert (above if order[0] == "setup" else below) in question
    assert (below if order[0] == "setup" else above) not in question
