"""The block scaling page: its numbers are lensa.blockscale's, and the two failures the issue names are reachable."""

from __future__ import annotations

import numpy as np
import pytest

from lensa import blockscale
from lensa.ui import i18n
from tests.pagetools import metrics, open_page

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def frame(at) -> dict[str, dict[str, str]]:
    table = at.dataframe[0].value
    return {row["Recipe"]: dict(row) for _, row in table.iterrows()}


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_renders_at_the_defaults_in_both_languages(lang):
    at = open_page("blocks", lang=lang)
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == i18n.text(lang, "blocks.title")
    assert len(metrics(at)) == 3 and len(at.get("plotly_chart")) == 1
    assert len(at.radio) == 2  # predict-then-reveal questions


def test_an_outlier_2_to_the_8_flushes_mxfp4_and_nvfp4_keeps_more():
    at = open_page("blocks", lang="en", outlier="8")
    rows = frame(at)
    mx, nv = rows["MXFP4 E2M1"], rows["NVFP4"]
    assert float(mx["Flushed to 0"].rstrip("%")) > 90
    assert float(nv["Flushed to 0"].rstrip("%")) < float(mx["Flushed to 0"].rstrip("%"))
    assert "MXFP4 flushes" in " ".join(m.value for m in at.markdown)


def test_mxfp8_floor_rule_saturates_and_rounding_up_fixes_it():
    at = open_page("blocks", lang="en", outlier="1.75")
    rows = frame(at)
    assert rows["MXFP8 E4M3 (OCP)"]["Saturated"] != "0%"
    assert rows["MXFP8 E4M3, scale rounded up"]["Saturated"] == "0%"
    assert metrics(at)["MXFP8 E4M3 (OCP): saturated"] == rows["MXFP8 E4M3 (OCP)"]["Saturated"]
    ocp, up = rows["MXFP8 E4M3 (OCP)"]["SQNR"], rows["MXFP8 E4M3, scale rounded up"]["SQNR"]
    assert float(up.split()[0]) > float(ocp.split()[0])


def test_page_numbers_are_the_library_s():
    at = open_page("blocks", lang="en", outlier="3", n="16", grad="1e-4")
    x = (np.random.default_rng(21).standard_normal(32)[:16] * 1e-4).astype(np.float32)
    x[5] = np.float32(float(np.abs(np.delete(x, 5)).max()) * 2.0**3)
    expected = blockscale.lost(x, "nvfp4")
    assert frame(at)["NVFP4"]["Flushed to 0"] == i18n.percent(expected.flushed, "en")
    assert metrics(at)["NVFP4: flushed to 0"] == i18n.percent(expected.flushed, "en")
    assert frame(at)["NVFP4"]["SQNR"] == f"{i18n.number(expected.sqnr_db, 'en', 1)} dB"
