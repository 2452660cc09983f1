"""Both languages complete, same keys and placeholders; numbers written the local way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lensa.ui import i18n

ROOT = Path(__file__).resolve().parent.parent


def test_catalogues_have_the_same_keys():
    en, id_ = i18n.catalogue("en"), i18n.catalogue("id")
    assert set(en) - set(id_) == set(), "keys missing in Indonesian"
    assert set(id_) - set(en) == set(), "keys missing in English"


def test_catalogues_have_the_same_placeholders():
    en, id_ = i18n.catalogue("en"), i18n.catalogue("id")
    different = {k: (i18n.placeholders(en[k]), i18n.placeholders(id_[k])) for k in en if k in id_}
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
        missing = [f"{s}.{k}" if s else k for s, k in used if not i18n.has_text(lang, f"{s}.{k}" if s else k)]
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
        (i18n.plain, (0.5,), "0.5", "0,5"),
        (i18n.plain, (1000.0,), "1,000", "1.000"),
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
                assert i18n.has_text(lang, f"quiz.{question}_{part}")
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
        assert all(i18n.has_text(lang, f"speed.source_{key}") for key in GPUS)
    assert i18n.text("en", "speed.source_a100") == GPUS["a100"].source
