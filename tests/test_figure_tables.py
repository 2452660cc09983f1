"""Every chart on a lesson page has a text alternative and, under it, its data as a table (issue 12)."""

from __future__ import annotations

import json

import pytest

from lensa.ui import i18n
from tests.pagetools import open_page

VIEWS = [
    ("memory", {}),
    ("fp16_range", {"fp8": "on"}),
    ("loss_scaling", {}),
    ("master_weights", {}),
    ("bf16", {}),
    ("speed", {}),
    ("fp16_range", {"data": "reference"}),
    ("loss_scaling", {"data": "reference"}),
    ("master_weights", {"data": "reference"}),
    ("bf16", {"data": "reference"}),
    ("blocks", {}),
    ("blocks", {"outlier": "8", "n": "16"}),
]


@pytest.mark.parametrize("lang", ["id", "en"])
@pytest.mark.parametrize(("key", "params"), VIEWS, ids=[f"{k}-{'-'.join(p.values()) or 'default'}" for k, p in VIEWS])
def test_every_chart_has_its_data_as_a_table_and_a_text_alternative(key, params, lang):
    at = open_page(key, lang=lang, **params)
    assert not at.exception, [e.value for e in at.exception]
    charts = at.get("plotly_chart")
    assert charts, "a lesson page shows at least one chart"
    tables = [e for e in at.expander if e.label == i18n.text(lang, "figure.table")]
    assert len(tables) == len(charts)
    for table in tables:
        cells = table.markdown[0].value
        assert cells.count("\n") >= 2, "a header, its rule and at least one row"
    for chart in charts:
        spec = json.loads(chart.proto.spec)
        alt = chart.proto.alt if hasattr(chart.proto, "alt") else ""
        assert spec["data"], "the chart plots something"
        assert alt.strip(), f"no text alternative on {key} {params}"
