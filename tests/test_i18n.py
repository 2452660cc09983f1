"""Both languages complete, same keys and placeholders; numbers written the local way."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from lensa.ui import i18n

ROOT = Path(__file__).resolve().parent.parent


def placeholders(text: str) -> set[str]:
    """The named fields ``{name}`` a text expects."""
    return {field for _, field, _, _ in string.Formatter().parse(text) if field}


def has_text(lang: str, key: str) -> bool:
    return key in i18n.catalogue(lang)


def test_catalogues_have_the_same_keys():
    en, id_ = i18n.catalogue("en"), i18n.catalogue("id")
    assert set(en) - set(id_) == set(), "keys missing in Indonesian"
    assert set(id_) - set(en) == set(), "keys missing in English"


def test_catalogues_have_the_same_placeholders():
    en, id_ = i18n.catalogue("en"), i18n.catalogue("id")
    different = {k: (placeholders(en[k]), placeholders(id_[k])) for k in en if k in id_}
    different = {k: v for k, v in different.items() if v[0] != v[1]}
    assert different == {}


def test_no_text_is_empty_or_left_untranslated_by_accident():
    en, id_ = i18n.catalogue("en"), i18n.catalogue("id")
    assert all(v.strip() for v in en.values()) and all(v.strip() for v in id_.values())

    # Names, units and citations may be the same in both; prose may not.
    def words(text: str) -> int:
        return len(re.findall(r"[A-Za-z]{2,}", re.sub(r"\{\w+\}", "", text)))

    same = [k for k in en if en[k] == id_[k] and words(en[k]) > 4 and not k.startswith("refs.")]
    assert same == [], same


def _literal_keys_used_in_code() -> set[tuple[str, str]]:
    """(section, key) pairs of every literal page.t("...") call, with the page's own section."""
    found = set()
    for path in [
        ROOT / "app.py",
        *sorted((ROOT / "pages").glob("*.py")),
        *sorted((ROOT / "lensa" / "ui").glob("*.py")),
    ]:
        source = path.read_text()
        section = re.search(r'setup\("(\w+)"\)', source)
        for key in re.findall(r'\.t\(\s*"([\w.]+)"', source):
            if "." in key:
                found.add(("", key))
            elif section:
                found.add((section.group(1), key))
    return found


def test_every_literal_key_used_by_the_code_exists():
    used = _literal_keys_used_in_code()
    assert len(used) > 80  # the scan really found the pages' texts
    for lang in i18n.LANGUAGES:
        missing = [f"{s}.{k}" if s else k for s, k in used if not has_text(lang, f"{s}.{k}" if s else k)]
        assert missing == [], f"{lang}: {missing}"


@pytest.mark.parametrize(
    ("url", "session", "locale", "expected"),
    [
        ("en", "id", "id-ID", "en"),
        (" EN ", None, None, "en"),
        (None, "en", "id-ID", "en"),
        (None, None, "id-ID", "id"),
        (None, None, "id", "id"),
        (None, None, "en-GB", "en"),
        (None, None, "de-DE", "en"),
        (None, None, None, "id"),
        ("xx", None, "de", "en"),
        ("<script>", None, None, "id"),
    ],
)
def test_language_choice_order(url, session, locale, expected):
    assert i18n.choose_language(url, session, locale) == expected


@pytest.mark.parametrize(
    ("fn", "args", "en", "id_"),
    [
        (i18n.gigabytes, (107.84e9,), "107.8 GB", "107,8 GB"),
        (i18n.gigabytes, (9.126805504e9,), "9.1 GB", "9,1 GB"),
        (i18n.gigabytes, (1120e9,), "1,120.0 GB", "1.120,0 GB"),
        (i18n.percent, (17 / 400,), "4.3%", "4,3%"),
        (i18n.percent, (364 / 400,), "91%", "91%"),
        (i18n.percent, (0.0,), "0%", "0%"),
        (i18n.percent, (0.0014440784630462727,), "0.14%", "0,14%"),
        (i18n.percent, (1.0,), "100%", "100%"),
        (i18n.sci, (1e-6,), "1.0e-6", "1,0e-6"),
        (lambda x, lang: i18n.sci(x, lang, 3), (9.5367431640625e-4,), "9.54e-4", "9,54e-4"),
        (i18n.sci, (2.0**-14,), "6.1e-5", "6,1e-5"),
        (i18n.sci, (0.0,), "0", "0"),
        (lambda x, lang: i18n.sci(x, lang, 3), (9.74,), "9.74", "9,74"),
        (i18n.seconds, (21.236,), "21 s", "21 s"),
        (i18n.seconds, (1.327,), "1.3 s", "1,3 s"),
        (i18n.ratio, (16.0,), "16×", "16×"),
        (i18n.ratio, (2.46,), "2.5×", "2,5×"),
        (i18n.number, (8192,), "8,192", "8.192"),
        (i18n.decimal, (0.5,), "0.5", "0,5"),
        (i18n.decimal, (1000.0,), "1,000", "1.000"),
    ],
)
def test_numbers_by_language(fn, args, en, id_):
    assert fn(*args, "en") == en
    assert fn(*args, "id") == id_


def test_halves_round_up_as_people_expect():
    assert i18n.percent(0.0425, "en") == "4.3%"  # 4.25 -> 4.3, not banker's 4.2
    assert i18n.percent(0.675, "en") == "68%"
    assert i18n.sci(1.25e-6, "en") == "1.3e-6"


# --- check-yourself answers -----------------------------------------------------------------


def _questions(lang: str) -> set[str]:
    return {k.removeprefix("quiz.") for k in i18n.catalogue(lang) if re.fullmatch(r"quiz\.\w+_q\d+", k)}


def test_the_right_answer_is_stored_once_for_every_language():
    answers = i18n.answers()
    assert _questions("en") == _questions("id") == set(answers)
    for lang in i18n.LANGUAGES:
        per_language = [k for k in i18n.catalogue(lang) if re.fullmatch(r"quiz\.\w+_right", k)]
        assert per_language == [], "the answer lives in answers.toml"
        for question in answers:
            for part in ("a", "b", "c", "why"):
                assert has_text(lang, f"quiz.{question}_{part}")
    assert set(answers.values()) <= {"a", "b", "c"}


def test_right_answers_are_spread_over_the_positions():
    counts = {letter: list(i18n.answers().values()).count(letter) for letter in "abc"}
    assert min(counts.values()) >= len(i18n.answers()) // 4, counts


# --- Indonesian as a careful technical writer would write it (see lensa/text/README.md) -------------

# Words a read-through found, and what to write instead.
_NOT_IN_INDONESIAN = {
    r"\bterbulatkan\b": "dibulatkan: rounding is something a format does",
    r"\b[Ii]nspektur\b": "pemeriksa: an inspektur is an official",
    r"\bseri ke genap\b": "say what happens at a tie",
    r"\b[Ss]ebuah (angka|gradient|overflow|weight|loss scale|tes)\b": "no article before a countable term",
    r"\bsecepat\b": "lebih cepat daripada, or … kecepatan FP32",
    r"\bberpisah dari\b": "menyimpang dari",
    r"\bbesaran\b": "a physical quantity; write nilai or nilai mutlak",
    r"\b(?<![Nn]ilai )berhingga terbesar\b": "nilai berhingga terbesar",
    r"\b[Tt]raining\b": "pelatihan (translated, see the README)",
    r"\b[Qq]uantization\b": "kuantisasi (translated, see the README)",
    r"\b[A-Za-z]*[A-Za-z]-nya\b": "no Indonesian suffix on an English term: ini, itu, tersebut",
}


@pytest.mark.parametrize("pattern", list(_NOT_IN_INDONESIAN))
def test_indonesian_follows_the_house_style(pattern):
    # refs are citations (English titles); code spans are code.
    texts = {k: re.sub(r"`[^`]*`", "", v) for k, v in i18n.catalogue("id").items() if not k.startswith("refs.")}
    found = {k: re.search(pattern, v).group(0) for k, v in texts.items() if re.search(pattern, v)}
    assert found == {}, _NOT_IN_INDONESIAN[pattern]


def test_every_gpu_source_is_written_in_both_languages():
    from lensa.speed import GPUS

    for lang in i18n.LANGUAGES:
        assert all(has_text(lang, f"speed.source_{key}") for key in GPUS)
    assert i18n.text("en", "speed.source_a100") == GPUS["a100"].source


# --- keys built with f-strings ------------------------------------------------------------------


def _tuple_after(path: str, template: str) -> tuple[str, ...]:
    """The literal tuple a comprehension feeds into ``page.t(f"<template>")`` (read from the code, not copied)."""
    source = (ROOT / path).read_text()
    found = re.search(rf'f"{re.escape(template)}"[^\n]*? for \w+ in (\([^)]*\))', source)
    assert found, f"{path}: no literal tuple feeds {template!r}"
    return ast.literal_eval(found.group(1))


def _fstring_keys() -> dict[tuple[str, str], set[str]]:
    """(file, template) -> every full catalogue key the template can build, from the values the code can pass."""
    from typing import get_args

    from lensa import blockscale, estimators, formats, inspector, master, memory
    from lensa.live import ARMS
    from lensa.live.errors import ErrorKind
    from lensa.models import PRESETS
    from lensa.runstats import KINDS
    from lensa.speed import GPUS, mixed_precision_mode
    from lensa.ui.site import DATA_SOURCES, PAGES, PAGES_BY_KEY, STEPS

    def options(page: str, name: str) -> tuple[str, ...]:
        return PAGES_BY_KEY[page].control(name).options  # type: ignore[union-attr]

    def section(name: str, values) -> set[str]:
        return {f"{name}.{v}" for v in values}

    precisions, optimizers = options("memory", "precision"), memory.OPTIMIZERS
    parts = {c.key for p in precisions for o in optimizers for c in memory.state_components(p, o)}
    others = {r.key for p in PRESETS.values() for r in p.how_others_count(8).rows}
    others |= {r.key for r in estimators.how_others_count(PRESETS["gpt2"].shape(), 8).rows}
    modes = {m for g in GPUS.values() for m in ("fp32", "tf32", mixed_precision_mode(g), "fp8") if g.peak(m)}
    fields = [f.name for f in inspector.field_bits(inspector.inspect("0.1", "fp16"))]
    verdicts = get_args(formats.Fp16AgainstBf16)
    bounds = set(
        re.findall(r'key = "(\w+)" if bounds.window else "(\w+)"', (ROOT / "pages/loss_scaling.py").read_text())[0]
    )
    regimes = ("zero", "subnormal", "normal")
    sources = ("reference", "lab", "upload")  # measured.Source.key: every data source but the illustration
    assert set(sources) == set(DATA_SOURCES) - {"illustration"}
    quiz = {f"quiz.{q}_{letter}" for q in i18n.answers() for letter in "abc"}
    shown = ast.literal_eval(re.search(r"^SHOWN = (\([^)]*\))", (ROOT / "pages/blocks.py").read_text(), re.M).group(1))
    col = _tuple_after("lensa/ui/format_table.py", "common.col_{k}")
    return {
        ("app.py", "idea_{i}"): section("overview", (f"idea_{i}" for i in range(1, len(STEPS) + 1))),
        ("app.py", "faq_q{i}"): section("overview", (f"faq_q{i}" for i in range(1, 7))),
        ("app.py", "faq_a{i}"): section("overview", (f"faq_a{i}" for i in range(1, 7))),
        ("lensa/ui/format_table.py", "also.option_{o}"): section(
            "also",
            (f"option_{o}" for o in PAGES_BY_KEY["bf16"].control("also").options),  # type: ignore[union-attr]
        ),
        ("pages/blocks.py", "recipe_{k}"): section("blocks", (f"recipe_{k}" for k in shown)),
        ("pages/blocks.py", "outcome_{o}"): section("blocks", (f"outcome_{o}" for o in blockscale.OUTCOMES)),
        ("pages/bf16.py", "bf16_data.explain_{verdict}"): section("bf16_data", (f"explain_{v}" for v in verdicts)),
        ("pages/bf16.py", "explain_{verdict}"): section("bf16", (f"explain_{v}" for v in verdicts)),
        ("pages/formats.py", "out_of_range_{parsed.out_of_range}"): section(
            "formats", ("out_of_range_huge", "out_of_range_tiny")
        ),
        ("pages/formats.py", "category.{report.category}"): section(
            "category", set(get_args(formats.Category)) - {"nan"}
        ),
        ("pages/formats.py", "field_{field.name}"): section("formats", (f"field_{f}" for f in fields)),
        ("pages/fp16_range.py", "fp16_range_data.explain_{regime}"): section(
            "fp16_range_data", (f"explain_{r}" for r in regimes)
        ),
        ("pages/fp16_range.py", "explain_{regime}"): section("fp16_range", (f"explain_{r}" for r in regimes)),
        ("pages/lab.py", "device_{v}"): section("lab", (f"device_{v}" for v in options("lab", "device"))),
        ("pages/lab.py", "lab.arm_{a}"): section("lab", (f"arm_{a}" for a in ARMS)),
        ("pages/loss_scaling.py", "loss_scaling_data.{key}"): section("loss_scaling_data", bounds),
        ("pages/memory.py", "precision_{v}"): section("memory", (f"precision_{v}" for v in precisions)),
        ("pages/memory.py", "optimizer_{v}"): section("memory", (f"optimizer_{v}" for v in optimizers)),
        ("pages/memory.py", "ckpt_{v}"): section("memory", (f"ckpt_{v}" for v in memory.CHECKPOINTING)),
        ("pages/memory.py", "attention_{v}"): section(
            "memory", (f"attention_{v}" for v in options("memory", "attention"))
        ),
        ("pages/memory.py", "part_{component.key}"): section("memory", (f"part_{k}" for k in parts)),
        ("pages/memory.py", "part_{c.key}"): section("memory", (f"part_{k}" for k in parts)),
        ("pages/memory.py", "explain_{precision}"): section("memory", (f"explain_{p}" for p in precisions)),
        ("pages/memory.py", "opt_note_{optimizer}"): section("memory", (f"opt_note_{o}" for o in optimizers)),
        ("pages/memory.py", "act_{precision}"): section("memory", (f"act_{p}" for p in precisions)),
        # shown only with ZeRO on more than one GPU: stages 1 to 3
        ("pages/memory.py", "explain_zero{zero}"): section(
            "memory", (f"explain_zero{z}" for z in PAGES_BY_KEY["memory"].control("zero").stops if z > 0)
        ),
        ("pages/memory.py", "explain_ckpt_{checkpointing}"): section(
            "memory", (f"explain_ckpt_{c}" for c in memory.CHECKPOINTING if c != "none")
        ),
        ("pages/memory.py", "others_{row.key}"): section("memory", (f"others_{k}" for k in others)),
        ("pages/speed.py", "bar_{m}"): section("speed", (f"bar_{m}" for m in modes)),
        ("pages/speed.py", "source_{gpu_key}"): section("speed", (f"source_{k}" for k in GPUS)),
        ("lensa/ui/format_table.py", "common.col_{k}"): section("common", (f"col_{k}" for k in col)),
        ("lensa/ui/frame.py", "nav.{target.key}"): section("nav", (p.key for p in PAGES)),
        ("lensa/ui/frame.py", "nav.{info.key}"): section("nav", (p.key for p in PAGES)),
        ("lensa/ui/live_view.py", "live.error_{exc.kind}"): section(
            "live", (f"error_{k}" for k in get_args(ErrorKind))
        ),
        ("lensa/ui/live_view.py", "lab.col_{k}"): section(
            "lab", (f"col_{k}" for k in _tuple_after("lensa/ui/live_view.py", "lab.col_{k}"))
        ),
        ("lensa/ui/live_view.py", "lab.arm_{row['arm']}"): section("lab", (f"arm_{a}" for a in ARMS)),
        ("lensa/ui/live_view.py", "lab.mem_{k}"): section(
            "lab", (f"mem_{k}" for k in _tuple_after("lensa/ui/live_view.py", "lab.mem_{k}"))
        ),
        ("lensa/ui/live_view.py", "lab.arm_{name}"): section("lab", (f"arm_{a}" for a in ARMS)),
        ("lensa/ui/live_view.py", "lab.arm_{arm}"): section("lab", ("arm_fp16", "arm_bf16")),
        ("lensa/ui/live_view.py", "speed.measure_col_{k}"): section(
            "speed", (f"measure_col_{k}" for k in _tuple_after("lensa/ui/live_view.py", "speed.measure_col_{k}"))
        ),
        ("lensa/ui/recorded_run.py", "data.source_{v}"): section("data", (f"source_{v}" for v in DATA_SOURCES)),
        ("lensa/ui/recorded_run.py", "data.kind_{declared.default}"): section("data", (f"kind_{k}" for k in KINDS)),
        ("lensa/ui/recorded_run.py", "data.kind_{v}"): section("data", (f"kind_{k}" for k in KINDS)),
        ("lensa/ui/recorded_run.py", "data.kind_{kind}"): section("data", (f"kind_{k}" for k in KINDS)),
        ("lensa/ui/recorded_run.py", "data.line_{sel.source.key}"): section("data", (f"line_{s}" for s in sources)),
        ("lensa/ui/recorded_run.py", "data.scaler_{source.key}"): section("data", (f"scaler_{s}" for s in sources)),
        ("lensa/ui/recorded_run.py", "common.col_{k}"): section("common", (f"col_{k}" for k in col)),
        ("lensa/ui/widgets.py", "common.{v}"): section("common", ("off", "on")),
        ("lensa/ui/quiz.py", "{base}_{letter}"): quiz,
        ("pages/master_weights.py", "outcome_{f}"): section(
            "master_weights", (f"outcome_{f}" for f in _tuple_after("pages/master_weights.py", "outcome_{f}"))
        ),
        ("pages/master_weights.py", "outcome_{outcome.direction}"): section(
            "master_weights", (f"outcome_{d}" for d in get_args(master.Direction))
        ),
        ("pages/master_weights.py", "explain_fp32_{master.regime}"): section(
            "master_weights", (f"explain_fp32_{r}" for r in get_args(master.Regime))
        ),
    }


def _fstring_templates_in_code() -> set[tuple[str, str]]:
    found = set()
    for path in [
        ROOT / "app.py",
        *sorted((ROOT / "pages").glob("*.py")),
        *sorted((ROOT / "lensa" / "ui").glob("*.py")),
    ]:
        for m in re.finditer(r"""\.t\(\s*f(["'])(.*?)\1""", path.read_text()):
            found.add((str(path.relative_to(ROOT)), m.group(2)))
    return found


def test_every_fstring_key_template_in_the_code_is_enumerated_below():
    # A new page.t(f"...") must get its values listed in _fstring_keys, or this fails.
    assert _fstring_templates_in_code() == set(_fstring_keys())


def test_every_key_an_fstring_can_build_exists_in_both_catalogues():
    keys = _fstring_keys()
    assert all(keys.values()), [t for t, v in keys.items() if not v]  # every template has values to check
    assert sum(len(v) for v in keys.values()) > 150
    for lang in i18n.LANGUAGES:
        missing = {t: sorted(k for k in v if not has_text(lang, k)) for t, v in keys.items()}
        assert {t: m for t, m in missing.items() if m} == {}, lang
