"""Both languages complete, same keys and placeholders; numbers written the local way."""

from __future__ import annotations

import ast
import math
import re
import shutil
import string
from pathlib import Path

import numpy as np
import pytest

from lensa.ui import i18n
from tests import catalogue_keys

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
        (i18n.signed_percent, (17 / 400,), "+4.3%", "+4,3%"),
        (i18n.signed_percent, (-0.0052,), "−0.52%", "−0,52%"),
        (i18n.signed_percent, (0.0,), "+0%", "+0%"),
        (i18n.sci, (1e-6,), "1.0e-6", "1,0e-6"),
        (lambda x, lang: i18n.sci(x, lang, 3), (9.5367431640625e-4,), "9.54e-4", "9,54e-4"),
        (i18n.sci, (2.0**-14,), "6.1e-5", "6,1e-5"),
        (i18n.sci, (0.0,), "0", "0"),
        (lambda x, lang: i18n.sci(x, lang, 3), (9.74,), "9.74", "9,74"),
        (i18n.seconds, (21.236,), "21 s", "21 s"),
        (i18n.seconds, (1.327,), "1.3 s", "1,3 s"),
        (i18n.ratio, (16.0,), "16×", "16×"),
        (i18n.ratio, (2.46,), "2.5×", "2,5×"),
        (i18n.ratio, (1 / 57,), "0.018×", "0,018×"),  # a CPU's emulated BF16: not "0.0×"
        (i18n.ratio, (0.5,), "0.50×", "0,50×"),
        (i18n.ratio, (0.96,), "1.0×", "1,0×"),
        (i18n.number, (8192,), "8,192", "8.192"),
        (i18n.decimal, (0.5,), "0.5", "0,5"),
        (i18n.decimal, (1000.0,), "1,000", "1.000"),
    ],
)
def test_numbers_by_language(fn, args, en, id_):
    assert fn(*args, "en") == en
    assert fn(*args, "id") == id_


def _read_percent(text: str) -> float:
    return float(text.removesuffix("%").replace(".", "").replace(",", ".")) if "," in text else float(text[:-1])


@pytest.mark.parametrize(
    ("counts", "en"),
    [
        ((0, 130, 270, 0), ["0%", "32.5%", "67.5%", "0%"]),  # each on its own reads 33% + 68%: a decimal more, exact
        ((0, 129, 271, 0), ["0%", "32%", "68%", "0%"]),  # already whole: as percent() writes them
        ((1, 129, 270, 0), ["0.25%", "32.25%", "67.5%", "0%"]),  # 0.25% keeps its two digits: two decimals for all
        ((17, 383, 0, 0), ["4.25%", "95.75%", "0%", "0%"]),  # 4.3% + 96% on their own; 4.3% + 95.8% still 100.1%
        ((0, 0, 0, 0), ["0%", "0%", "0%", "0%"]),
        ((400, 0, 0, 0), ["100%", "0%", "0%", "0%"]),
        ((1, 1, 1, 0), ["34%", "33%", "33%", "0%"]),  # never exact: largest remainder; equal ones, the first in order
    ],
)
def test_shares_shown_together_add_up_to_100_as_written(counts, en):
    shares = dict(zip("abcd", (n / max(1, sum(counts)) for n in counts), strict=True))
    shown = i18n.percents(shares, "en")
    assert list(shown.values()) == en
    written = i18n.percents(shares, "id")
    assert [t.replace(",", ".") for t in written.values()] == list(shown.values())
    if any(counts):
        assert math.isclose(sum(_read_percent(t) for t in written.values()), 100, abs_tol=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_shares_shown_together_add_up_to_100_and_none_above_0_reads_0(seed):
    """Random splits, tiny shares among them (a recorded run's one value in a million): the written numbers add
    up to 100, a share above 0 never reads 0% and keeps two significant digits, and each is within one unit of its
    last digit of the share."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        raw = rng.random(4) * (10.0 ** rng.integers(-7, 1, 4)) * (rng.random(4) < 0.8)
        if not raw.sum():
            continue
        shares = dict(zip("abcd", (float(x) for x in raw / raw.sum()), strict=True))
        shown = i18n.percents(shares, "en")
        values = {k: float(t[:-1]) for k, t in shown.items()}
        places = max(len(t[:-1].partition(".")[2]) for t in shown.values())
        assert math.isclose(sum(values.values()), 100, abs_tol=10.0**-places / 2), shown
        for k, share in shares.items():
            assert (values[k] == 0) == (share == 0), (shares, shown)
            if share:  # as close as percent()'s two significant digits, at least
                second_digit = 10.0 ** (math.floor(math.log10(share * 100)) - 1)
                assert abs(values[k] - share * 100) <= second_digit * (1 + 1e-9), (k, shares, shown)
            assert abs(values[k] - share * 100) < 10.0**-places + 1e-12, (k, shares, shown)


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
    from lensa.models.speed import GPUS

    for lang in i18n.LANGUAGES:
        assert all(has_text(lang, f"speed.source_{key}") for key in GPUS)
    assert i18n.text("en", "speed.source_a100") == GPUS["a100"].source


# --- the keys the code uses (tests/catalogue_keys.py reads them from the code's calls) -------------------


def _literal_values(tp: object) -> set[str]:
    """The strings of a ``Literal`` type, through ``Optional`` and unions."""
    from typing import Literal, get_args, get_origin

    if get_origin(tp) is Literal:
        return {a for a in get_args(tp) if isinstance(a, str)}
    return set().union(*(_literal_values(a) for a in get_args(tp))) if get_args(tp) else set()


def dynamic_keys() -> dict[str, set[str]]:
    """Families of keys the code builds from data (a hole the code does not fill with literals), each from the
    data that builds it: the site's pages, the core's registries and types. Every key here must be one that an
    open key in the code can build (checked), and every open key must be able to build one of these."""
    import inspect
    from typing import get_args, get_type_hints

    from lensa.lessons import blocks as lesson_blocks
    from lensa.lessons import low_bits
    from lensa.lessons import master_weights as lesson_master
    from lensa.live import ALL_ARMS
    from lensa.live.errors import ErrorKind
    from lensa.models import estimators, master, memory
    from lensa.models.configs import PRESETS
    from lensa.models.speed import GPUS, mixed_precision_mode
    from lensa.numerics import blockscale, exact, formats, inspector
    from lensa.numerics.training_recipes import ROLES
    from lensa.runstats import KINDS
    from lensa.ui.glossary import TERM_KEYS
    from lensa.ui.site import ALSO, DATA_SOURCES, PAGES, PAGES_BY_KEY, STEPS

    def options(page: str, name: str) -> tuple[str, ...]:
        return PAGES_BY_KEY[page].control(name).options  # type: ignore[union-attr]

    def family(section: str, prefix: str, values) -> set[str]:
        return {f"{section}.{prefix}{v}" for v in values}

    precisions, optimizers = options("memory", "precision"), memory.OPTIMIZERS
    parts = {c.key for p in precisions for o in optimizers for c in memory.state_components(p, o)}
    others = {r.key for p in PRESETS.values() for r in p.how_others_count(8).rows}
    others |= {r.key for r in estimators.how_others_count(PRESETS["gpt2"].shape(), 8).rows}
    modes = {m for g in GPUS.values() for m in ("fp32", "tf32", mixed_precision_mode(g), "fp8") if g.peak(m)}
    verdicts = get_args(formats.Fp16AgainstBf16)
    regimes = inspect.signature(formats.most_common_category).parameters["among"].default
    sources = set(DATA_SOURCES) - {"illustration"}  # measured.Source.key: every data source but the illustration
    return {
        "an idea per step (site.STEPS)": family("overview", "idea_", (p.key for p in STEPS)),
        "a navigation entry per page (site.PAGES)": family("nav", "", (p.key for p in PAGES)),
        "the also choice": family("also", "option_", ALSO.options),
        "BF16 against FP16": family("bf16", "explain_", verdicts) | family("bf16_data", "explain_", verdicts),
        "step 2's regimes": family("fp16_range", "explain_", regimes) | family("fp16_range_data", "explain_", regimes),
        "block outcomes": family("blocks", "outcome_", blockscale.OUTCOMES),
        "the block page's recipes (lensa.lessons.blocks)": family("blocks", "recipe_", lesson_blocks.SHOWN),
        "the block page's flush regimes": family("blocks", "explain_", get_args(lesson_blocks.FlushRegime)),
        "what one update does, per format (lensa.lessons.master_weights)": family(
            "master_weights", "outcome_", lesson_master.OUTCOME_FORMATS
        ),
        "where OCP's MXFP8 scale stands": family("blocks", "explain_floor_", get_args(blockscale.FloorRegime)),
        "what the rotation did (lensa.lessons.low_bits)": family(
            "low_bits", "explain_rotation_", get_args(low_bits.RotationVerdict)
        ),
        "typed values out of range": family(
            "formats", "out_of_range_", _literal_values(get_type_hints(exact.Parsed)["out_of_range"])
        ),
        "how the inspector read a typed number": family("formats", "read_", get_args(exact.Note)),
        "categories the inspector reports (a NaN is shown as NaN)": family(
            "category", "", set(get_args(formats.Category)) - {"nan"}
        ),
        "bit fields": family(
            "formats", "field_", (f.name for f in inspector.field_bits(inspector.inspect("0.1", "fp16")))
        ),
        "lab devices": family("lab", "device_", options("lab", "device")),
        "lab arms": family("lab", "arm_", ALL_ARMS),
        "lab recipe groups": family("lab", "recipes_group_", options("lab", "recipes")),
        "a linear layer's tensors": family("lab", "role_", ROLES),
        "live errors": family("live", "error_", get_args(ErrorKind)),
        "master copy regimes": family("master_weights", "explain_fp32_", get_args(master.Regime)),
        "update directions": family("master_weights", "outcome_", get_args(master.Direction)),
        "precisions": family("memory", "precision_", precisions)
        | family("memory", "explain_", precisions)
        | family("memory", "act_", precisions),
        "models": family("memory", "model_", (k.replace("-", "_") for k in options("memory", "model"))),
        "optimizers": family("memory", "optimizer_", optimizers) | family("memory", "opt_note_", optimizers),
        "checkpointing": family("memory", "ckpt_", memory.CHECKPOINTING)
        | family("memory", "explain_ckpt_", (c for c in memory.CHECKPOINTING if c != "none")),
        "attention": family("memory", "attention_", options("memory", "attention")),
        "model states": family("memory", "part_", parts),
        # shown only with ZeRO on more than one GPU: stages 1 to 3
        "ZeRO stages": family(
            "memory", "explain_zero", (z for z in PAGES_BY_KEY["memory"].control("zero").stops if z > 0)
        ),
        "how others count": family("memory", "others_", others),
        "speed modes": family("speed", "bar_", modes),
        "GPU sources": family("speed", "source_", GPUS),
        "tensor kinds": family("data", "kind_", KINDS),
        "data sources": family("data", "source_", DATA_SOURCES)
        | family("data", "line_", sources)
        | family("data", "scaler_", sources),
        "glossary terms (lensa.ui.glossary.TERMS)": family("glossary", "term_", TERM_KEYS)
        | family("glossary", "def_", TERM_KEYS),
        "questions (answers.toml)": {
            f"quiz.{q}{part}" for q in i18n.answers() for part in ("", "_a", "_b", "_c", "_why")
        },
    }


def _catalogues() -> dict[str, dict[str, str]]:
    return {lang: i18n.catalogue(lang) for lang in i18n.LANGUAGES}


def _problems(root: Path = ROOT, catalogues: dict[str, dict[str, str]] | None = None) -> dict[str, list[str]]:
    catalogues = catalogues or _catalogues()
    sections = {k.split(".")[0] for c in catalogues.values() for k in c}
    found = catalogue_keys.check(catalogue_keys.scan(root, sections), catalogues, dynamic_keys())
    return {what: items for what, items in found.items() if items}


def test_every_key_the_code_uses_is_in_both_catalogues_and_every_catalogue_key_is_used():
    usage = catalogue_keys.scan(ROOT, {k.split(".")[0] for k in i18n.catalogue("en")})
    assert len(usage.exact) > 400 and len(usage.patterns) > 40  # the scan really read the pages' calls
    assert sum(len(v) for v in dynamic_keys().values()) > 150
    assert _problems() == {}


def test_the_key_check_fails_on_a_missing_or_an_unused_key():
    catalogues = _catalogues()
    broken = {lang: dict(c) for lang, c in catalogues.items()}
    del broken["id"]["memory.title"]  # used literally: page.t("title") in pages/memory.py via step_header
    del broken["en"]["speed.source_h100"]  # built from data: f"source_{...}" over lensa.models.speed.GPUS
    broken["en"]["speed.not_shown_anywhere"] = broken["id"]["speed.not_shown_anywhere"] = "Nothing uses this."
    problems = _problems(catalogues=broken)
    assert any(p.startswith("memory.title ") for p in problems["missing in id"]), problems
    assert "speed.source_h100 (built from data)" in problems["missing in en"], problems
    assert problems["unused in en"] == problems["unused in id"] == ["speed.not_shown_anywhere"]
    assert set(problems) == {"missing in id", "missing in en", "unused in en", "unused in id"}


def _copy_of_the_code(tmp_path: Path) -> Path:
    for name in ("app.py",):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("pages", "lensa"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "data", "*.npz"))
    return tmp_path


def test_the_key_check_reads_calls_not_source_text(tmp_path):
    """Renaming variables changes nothing; a new key built from data nobody listed, or a listed family the code no
    longer builds, fails."""
    root = _copy_of_the_code(tmp_path)
    memory_page = root / "pages" / "memory.py"
    source = memory_page.read_text()
    renamed = _renamed(source, {"model_key": "chosen_model", "precision": "mode_now", "k": "key_of_model"})
    assert renamed.count("chosen_model") > 3 and 'page.t("precision")' in source
    memory_page.write_text(renamed)
    assert _problems(root) == {}

    speed_page = root / "pages" / "speed.py"
    source = speed_page.read_text()
    assert source.count("page.t(f'source_{") == 1
    speed_page.write_text(source.replace("page.t(f'source_{", "page.t(f'origin_{"))
    problems = _problems(root)
    assert any(": origin_{…}" in p for p in problems["patterns nothing fills"]), problems
    assert any(p.startswith("GPU sources: speed.source_") for p in problems["families no code builds"]), problems


def test_a_literal_key_the_code_adds_must_be_in_the_catalogues(tmp_path):
    root = _copy_of_the_code(tmp_path)
    page_file = root / "pages" / "bf16.py"
    page_file.write_text(page_file.read_text() + '\nst.caption(page.t("a_new_caption"))\n')
    problems = _problems(root)
    assert (
        problems["missing in en"]
        == problems["missing in id"]
        == [f"bf16.a_new_caption (pages/bf16.py:{_lines(page_file)})"]
    )


def _renamed(source: str, names: dict[str, str]) -> str:
    """``source`` with its variables renamed (names only: strings and attributes stay as they are)."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = names.get(node.id, node.id)
            return node

    return ast.unparse(Rename().visit(ast.parse(source)))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_small_counts_are_written_as_words_in_both_languages():
    assert [i18n.count_in_words(n, "en") for n in (1, 6, 7, 12)] == ["one", "six", "seven", "twelve"]
    assert [i18n.count_in_words(n, "id") for n in (1, 6, 7, 11, 12)] == [
        "satu",
        "enam",
        "tujuh",
        "sebelas",
        "dua belas",
    ]
    assert (
        i18n.count_in_words(6, "id", capital=True) == "Enam" and i18n.count_in_words(12, "en", capital=True) == "Twelve"
    )
    assert i18n.count_in_words(13, "en") == "13" and i18n.count_in_words(1200, "id") == i18n.number(1200, "id")


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_overview_heading_says_the_count_of_steps_in_words(lang):
    from lensa.ui.site import STEP_COUNT
    from tests.pagetools import open_page

    home = open_page("overview", lang=lang)
    words = i18n.count_in_words(STEP_COUNT, lang)
    heading = i18n.text(lang, "overview.ideas_title", Steps=words.capitalize(), steps=words)
    assert heading in [h.value for h in home.subheader]
    if STEP_COUNT == 6:  # the lesson as it ships
        assert heading == {"en": "Six ideas in six steps", "id": "Enam gagasan dalam enam langkah"}[lang]


# "x times as fast" (a speed x times FP32's) is written the same way in both languages: "{x} as fast as" and
# "{x} kecepatan FP32" (lensa/text/README.md). "x faster" / "x lebih cepat" reads as x more than as fast (1.2×
# faster: 2.2 times the speed), so a number or ratio never comes before either.
RATIO_FASTER = {
    "en": re.compile(r"(\{\w+\}|\b\d[\d.,]*×?|\btimes|\btwice) faster"),
    "id": re.compile(r"(\{\w+\}|\b\d[\d,.]*×?|\bkali|\blipat) lebih cepat"),
}


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_speed_ratio_says_as_fast_as_never_x_faster(lang):
    said = {k: m.group(0) for k, v in i18n.catalogue(lang).items() if (m := RATIO_FASTER[lang].search(v))}
    assert said == {}
    # and the pattern does catch the phrase it forbids, not a format's name before "faster"
    assert RATIO_FASTER[lang].search({"en": "trained {speedup} faster", "id": "{speedup} lebih cepat"}[lang])
    assert not RATIO_FASTER[lang].search({"en": "Is BF16 faster?", "id": "Apakah BF16 lebih cepat?"}[lang])


def test_a_speed_ratio_is_said_in_both_languages_or_neither():
    en, id_ = i18n.catalogue("en"), i18n.catalogue("id")
    for key, text in en.items():
        if re.search(r"(\{\w+\}|\b\d[\d.,]*×?|\btimes) as fast as", text):
            assert "kecepatan" in id_[key], key  # "{x} kecepatan FP32", the same speed
