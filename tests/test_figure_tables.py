"""Every chart of every page has a text alternative and, under it, its data as a table that holds the numbers the
chart draws (issue 12, issue 24): read from the chart's plotly JSON and the table's Markdown, not from the code
that built them. The pages and their states come from the site's list of pages, not from a list kept here."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from lensa.models.memory import SEVEN_B
from lensa.models.speed import GPUS, step_times
from lensa.ui import figures, i18n
from lensa.ui.controls import NumberControl
from lensa.ui.site import MEASURED_ONLY, PAGES, PAGES_BY_KEY
from tests import chartdata
from tests.chartdata import Table, check, mutated, parse_markdown_table, read_number, shows
from tests.pagetools import open_page

LANGS = ("id", "en")


def states() -> list[tuple[str, dict[str, str]]]:
    """Each page as a link first opens it, with a recorded run where it can show one, with every narrower format,
    and with every slider at each end of its range."""
    found = []
    for page in PAGES:
        names = {c.name for c in page.controls}
        found.append((page.key, {}))
        if "data" in names:
            found.append((page.key, {"data": "reference"}))
        if "also" in names:
            found.append((page.key, {"also": "all"}))
        sliders = [c for c in page.controls if isinstance(c, NumberControl) and c.name not in MEASURED_ONLY]
        for end in (0, -1):
            if sliders:
                found.append((page.key, {c.name: c.to_url(c.stops[end]) for c in sliders}))
    return found


STATES = states()


def _id(state: tuple[str, dict[str, str]]) -> str:
    key, params = state
    return "-".join([key, *(f"{k}={v}" for k, v in params.items())]) if params else f"{key}-default"


@cache
def charts(
    key: str, params: tuple[tuple[str, str], ...], lang: str
) -> tuple[tuple[dict[str, Any], str, Table | None], ...]:
    """(plotly JSON, text alternative, data table or None) of each chart the page draws, in page order."""
    at = open_page(key, lang=lang, **dict(params))
    assert not at.exception, [e.value for e in at.exception]
    label = i18n.text(lang, "figure.table")
    return tuple(
        (
            json.loads(chart.proto.spec),
            getattr(chart.proto, "alt", ""),
            chartdata.table_of(table) if table is not None else None,
        )
        for chart, table in chartdata.charts_and_tables(at._tree, label)
    )


def test_the_states_come_from_the_site():
    assert {key for key, _ in STATES} == set(PAGES_BY_KEY)
    assert ("loss_scaling", {"data": "reference"}) in STATES and ("blocks", {"data": "reference"}) in STATES


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("state", STATES, ids=[_id(s) for s in STATES])
def test_every_chart_has_a_text_alternative_and_a_table_of_its_numbers(state, lang):
    key, params = state
    drawn = charts(key, tuple(params.items()), lang)
    if PAGES_BY_KEY[key].step is not None:
        assert drawn, "a lesson step shows at least one chart"
    for n, (spec, alt, table) in enumerate(drawn, 1):
        assert alt.strip(), f"chart {n}: no text alternative"
        assert table is not None, f"chart {n}: no data table under it"
        assert table.rows, f"chart {n}: an empty table"
        assert check(spec, table, lang) == [], f"chart {n}"


# The states whose tables are perturbed: each page as it opens, and with a recorded run.
PERTURBED = [s for s in STATES if not s[1] or s[1] == {"data": "reference"}]


@pytest.mark.parametrize("state", PERTURBED, ids=[_id(s) for s in PERTURBED])
def test_a_table_that_lost_or_changed_any_drawn_number_fails(state):
    """The check can fail: for every chart, a wrong number in any cell it found a drawn number in, a wrong row
    key, or a missing row, is caught."""
    key, params = state
    for n, (spec, _, table) in enumerate(charts(key, tuple(params.items()), "en"), 1):
        assert table is not None
        reader = chartdata.Reader(spec, table, "en")
        assert reader.problems() == [] and reader.matched, f"chart {n}: reads no number"
        # a long table (a recorded run's 300 steps) is perturbed in 40 rows spread over it, ends included
        every = max(1, len(table.rows) // 40)
        sampled = {*range(0, len(table.rows), every), len(table.rows) - 1}
        cells = {(i, j) for i, j in reader.matched | {(i, 0) for i in reader.used} if i in sampled}
        tried = 0
        for i, j in sorted(cells):
            wrong = mutated(table.rows[i][j], "en")
            if wrong is None or wrong == table.rows[i][j]:
                continue
            rows = list(table.rows)
            rows[i] = (*rows[i][:j], wrong, *rows[i][j + 1 :])
            assert check(spec, Table(table.headers, tuple(rows)), "en"), f"chart {n}: {table.rows[i][j]!r} -> {wrong!r}"
            tried += 1
        assert tried >= len(sampled), f"chart {n}: too few cells perturbed ({tried})"
        for i in sorted(sampled):
            fewer = Table(table.headers, table.rows[:i] + table.rows[i + 1 :])
            assert check(spec, fewer, "en"), f"chart {n}: row {table.rows[i]} left out unnoticed"


def _time_bars(gpu: str, tokens: int = 4096) -> Any:
    t = step_times(GPUS[gpu], SEVEN_B.params, tokens)
    names = [m.upper() for m in t.modes]
    texts = [i18n.seconds(s, "en") for s in t.seconds]
    return figures.step_time_bars(names, t.seconds, ["#000"] * len(names), texts, "s", [""] * len(names), names, "en")


def _table(fig: Any) -> Table:
    return parse_markdown_table(
        "\n".join(
            ["| " + " | ".join(fig.table.headers) + " |", "|" + " --- |" * len(fig.table.headers)]
            + ["| " + " | ".join(row) + " |" for row in fig.table.rows]
        )
    )


def test_a_chart_beside_another_charts_table_fails():
    a100, a100_long, h100 = _time_bars("a100"), _time_bars("a100", 8192), _time_bars("h100")
    assert check(a100.to_dict(), _table(a100), "en") == []
    assert check(a100.to_dict(), _table(a100_long), "en")  # twice the seconds in every row
    assert check(a100.to_dict(), _table(h100), "en")  # another chip: other rows, other seconds


def test_charts_a_page_draws_only_after_a_run_are_read_too():
    # The lab draws these once a run has finished (no link state draws them): built here as it builds them.
    losses = figures.loss_curves(
        [("fp32", "FP32", [2.5, 1.25, 0.625]), ("fp16", "FP16", [2.5, 1.3])], "step", "loss", "en"
    )
    assert check(losses.to_dict(), _table(losses), "en") == []
    wrong = Table(_table(losses).headers, (("1", "2.5000", "2.5000"), ("2", "1.2500", "1.3001"), ("3", "0.6250", "—")))
    assert check(losses.to_dict(), wrong, "en")
    labels = figures.RunLabels("step", "log2 S", "clean", "skipped", "{step} {scale}", "{step} {scale}")
    run = figures.scaler_run([1, 2, 3], [16, 16, 15], [False, True, False], labels, overlay=("torch", [16, 15, 15]))
    assert check(run.to_dict(), _table(run), "en") == []
    rows = list(_table(run).rows)
    rows[1] = ("2", "2^16", "no", "2^15")  # the skipped step not marked
    assert check(run.to_dict(), Table(_table(run).headers, tuple(rows)), "en")


@pytest.mark.parametrize(
    ("cell", "lang", "value", "half_unit"),
    [
        ("1.3 s", "en", 1.3, 0.05),
        ("144.3 GB", "en", 144.3, 0.05),
        ("0.12%", "en", 0.0012, 0.00005),
        ("1,0e-6", "id", 1e-6, 0.05e-6),
        ("11.387", "id", 11387, 0.5),
        ("11,387", "en", 11387, 0.5),
        ("450", "en", 450, 5),  # 448 to two significant digits
        ("−1.79e-6", "en", -1.79e-6, 0.005e-6),
        ("2^16", "en", 65536, 0),
        ("0", "en", 0, 0),
        ("16×", "en", 16, 0.5),
    ],
)
def test_cells_read_back_as_the_reader_sees_them(cell, lang, value, half_unit):
    shown = read_number(cell, lang)
    assert shown is not None
    assert shown.value == pytest.approx(value, rel=1e-12) and shown.half_unit == pytest.approx(half_unit, rel=1e-9)


def test_display_rounding_is_half_a_unit_of_the_last_digit():
    assert shows("21 s", 21.236, "en") and not shows("21 s", 21.6, "en")
    assert shows("2^16", 2**16, "en") and shows("2^16", 2**16.4, "en") and not shows("2^16", 2**16.6, "en")
    assert shows("1", 1.0, "en", exact=True) and not shows("1", 1.0000001, "en", exact=True)
    assert not shows("0%", 1e-9, "en") and read_number("tok.weight", "en") is None


def test_markdown_tables_read_back_cell_by_cell():
    text = "| a | b \\| c |\n| --- | --- |\n| 1 | x \\| y |\n| 2 |  |"
    assert parse_markdown_table(text) == Table(("a", "b | c"), (("1", "x | y"), ("2", "")))
    with pytest.raises(ValueError):
        parse_markdown_table("| a |\n| 1 |")
