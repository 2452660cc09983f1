"""The block scaling page: its numbers are lensa.numerics.blockscale's, and the two failures the issue names are
reachable."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from lensa.lessons.blocks import SHOWN
from lensa.numerics import blockscale
from lensa.ui import i18n
from tests.pagetools import chart_specs, metrics, open_page, page_keys, scrub_frame

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels


def frame(at) -> dict[str, dict[str, str]]:
    table = at.dataframe[0].value
    return {row["Recipe"]: dict(row) for _, row in table.iterrows()}


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_renders_at_the_defaults_in_both_languages(lang):
    at = open_page("blocks", lang=lang)
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == i18n.text(lang, "blocks.title")
    assert len(metrics(at)) == 3 and len(chart_specs(at)) == 1
    assert [r.key for r in at.radio] == ["quiz.blocks.1"]  # predict-then-reveal: its first question, one at a time


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


# --- a recorded run: every block recipe on its tensors (file version 2) ----------------------------------------


def _frames(at) -> list:
    return [d.value for d in at.dataframe]


def test_the_reference_run_gives_every_recipe_per_layer_and_the_replay():
    from lensa.runstats import measured
    from lensa.ui import recorded_run

    recorded_run._load_reference.clear()
    run = recorded_run.Source("reference", "reference", recorded_run.reference_run()[0]).tensors
    assert run.has_recipes
    layer = run.names("weight")[0]
    step = run.steps("weight")[-1]
    at = open_page("blocks", lang="en", data="reference", kind="weight", layer=layer, step=str(step), recipe="nvfp4")
    assert not at.exception, [e.value for e in at.exception]
    frames = _frames(at)
    every = next(f for f in frames if "Recipe" in f.columns and len(f) == len(blockscale.RECIPES))
    want = run.get("weight", layer, step).recipe("nvfp4")
    row = every[every["Recipe"] == blockscale.RECIPES["nvfp4"].label].iloc[0]
    assert row["SQNR"] == f"{i18n.number(want.sqnr_db, 'en', 1)} dB"
    assert row["Flushed to 0"] == i18n.percent(want.flushed, "en")
    verdicts = next(f for f in frames if blockscale.RECIPES["nvfp4"].label in f.columns and "Layer" in f.columns)
    assert set(verdicts[blockscale.RECIPES["fp8_tensor"].label]) <= {"yes", "no: keep BF16"}
    replay = next(f for f in frames if "Overflows, current scaling" in f.columns)
    assert len(replay) == 1 and replay.iloc[0]["Layer"] == layer
    over = measured.delayed_replays(run, "weight", layer)[0].overflow[16]
    assert (replay.iloc[0].iloc[3] == "—") == (not over)
    recorded_run._load_reference.clear()


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_version_1_upload_says_it_predates_the_recipes(lang):
    import io
    import json

    from lensa import runstats as R
    from tests.test_measured_pages import upload, visit

    run = R.RunStats({"arm": "fp32"})
    run.add("weight_grad", "w", 1, R.summarize(np.ones((4, 4), np.float32)))
    with np.load(io.BytesIO(run.to_bytes()), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files if k in R._ARRAYS}
    header = json.loads(str(arrays["header"][()]))
    arrays["header"] = np.array(json.dumps({**header, "version": 1}))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    at = upload(visit("blocks", lang=lang, data="upload"), content=buf.getvalue())
    assert not at.exception, [e.value for e in at.exception]
    assert i18n.text(lang, "recipes.predates", version="1") in [i.value for i in at.info]


@pytest.mark.parametrize("key", page_keys(control="also"))
def test_steps_2_3_5_show_the_recipes_with_also_and_a_recorded_run(key):
    from lensa.ui import recorded_run

    recorded_run._load_reference.clear()
    at = open_page(key, lang="id", data="reference", also="all", recipe="mxfp4_e2m1")
    assert not at.exception, [e.value for e in at.exception]
    assert i18n.text("id", "recipes.title") in [h.value for h in at.subheader]
    assert any(i18n.text("id", "recipes.col_current") in d.value.columns for d in at.dataframe)
    plain = open_page(key, lang="id", data="reference")  # also=none: the recipes stay out of the way
    assert i18n.text("id", "recipes.title") not in [h.value for h in plain.subheader]
    recorded_run._load_reference.clear()


def test_a_bad_recipe_in_a_link_falls_back_without_an_error():
    at = open_page("blocks", lang="en", data="reference", recipe="fp3_imaginary")
    assert not at.exception, [e.value for e in at.exception]
    assert "Every block recipe on this run" in [h.value for h in at.subheader]


def test_a_version_2_run_without_recipe_records_says_so():
    from tests.runfixtures import reference_arms
    from tests.test_measured_pages import LAB, visit

    assert not reference_arms()["fp32"].has_recipes  # the synthetic runs are summarised without them
    at = visit("fp16_range", lang="en", session=LAB, data="lab", also="fp8")
    assert not at.exception, [e.value for e in at.exception]
    assert i18n.text("en", "recipes.not_kept") in [i.value for i in at.info]


def _filled(template: str, text: str) -> dict[str, str]:
    """The values ``text`` gives the placeholders of ``template`` (a repeated placeholder must repeat its value)."""
    pattern, seen = "", set()
    for literal, name in re.findall(r"([^{]*)(?:\{(\w+)\})?", template):
        pattern += re.escape(literal)
        if name:
            pattern += f"(?P={name})" if name in seen else f"(?P<{name}>.+?)"
            seen.add(name)
    match = re.search(pattern, text)
    assert match, "the paragraph is not the catalogue's sentence"
    return match.groupdict()


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_flush_sentence_gives_fp4s_rounding_to_0(lang):
    # The paragraph under an outlier of 2^8 says where a scaled value stops rounding to 0: ml_dtypes' FP4 rounds
    # the tie to 0 and the next float32 above it up to FP4's smallest value.
    at = open_page("blocks", lang=lang, outlier="8")
    said = _filled(i18n.text(lang, "blocks.explain_flush"), " ".join(m.value for m in at.markdown))
    tie, smallest = (float(said[k].replace(",", ".")) for k in ("tie", "smallest"))
    fp4 = ml_dtypes.float4_e2m1fn
    assert smallest == float(ml_dtypes.finfo(fp4).smallest_subnormal)
    above = np.nextafter(np.float32(tie), np.float32(1))
    assert np.array([tie, above], np.float32).astype(fp4).astype(np.float32).tolist() == [0.0, smallest]


def test_the_notes_give_both_of_deepseek_v3s_scales():
    # lensa.numerics.blockscale's 1×128 tile keeps DeepSeek-V3's inference code's unrounded FP32 scale (448 / amax, no
    # power of two); the notes say so and that the report (section 3.3.3) rounds some activations' scales to powers of
    # two.
    scale = float(blockscale.encode(np.full((1, 128), 0.3, np.float32), "fp8_1x128").block_scales[0])
    assert scale == pytest.approx(0.3 / 448, rel=1e-6) and not float(np.log2(scale)).is_integer()
    for lang in i18n.LANGUAGES:
        notes = i18n.text(lang, "blocks.notes")
        assert "3.3.3" in notes and "128×1" in notes


# --- on a phone (issue 41: at 390 px the 32 marks merged into one smear) -------------------------------------

PHONE_CHART_PX = 390 - 2 * 16  # Streamlit pads a phone's page by 1rem (16 px) either side
SMALLEST_LABEL_PX = 10.5  # the smallest font the other charts use on a phone (figures.COMPACT_COLUMN_LAYOUT)


def _over(base: dict, over: dict) -> dict:
    """scrub.js's merge: the phone layout over the figure's, objects key by key, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _over(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_on_a_phone_every_cell_of_the_block_has_its_own_room_and_every_recipe_its_name(lang):
    at = open_page("blocks", lang=lang, outlier="1.75")  # rounded, flushed and saturated marks
    chart = next(b for b in scrub_frame(at) if b["k"] == "chart")
    desktop, phone = chart["fig"]["layout"], _over(chart["fig"]["layout"], chart["compact"]["layout"])
    labels = desktop["yaxis"]["ticktext"]
    assert len(labels) == len(SHOWN)
    # the recipes' names leave the plot its whole width: written above their strips, each whole
    assert phone["yaxis"].get("showticklabels") is False
    named = {a["text"]: a for a in phone["annotations"]}
    assert sorted(named) == sorted(labels)
    size = phone["font"]["size"]
    assert size >= SMALLEST_LABEL_PX
    width = PHONE_CHART_PX - phone["margin"]["l"] - phone["margin"]["r"]
    assert all(len(label) * size * 0.6 <= width for label in labels), "a name longer than the chart is wide"
    assert all(named[label]["y"] == r and named[label]["yshift"] > 0 for r, label in enumerate(labels))
    # 32 cells across that width: a mark and its outline narrower than a cell, so neighbours do not touch
    lo, hi = phone["xaxis"]["range"]
    cell = width / (hi - lo)
    marks = [t for t in chart["fig"]["data"] if t.get("x")]
    assert sum(len(t["x"]) for t in marks) == 32 * len(labels)
    assert all(t["marker"]["size"] + t["marker"]["line"]["width"] < cell for t in marks), f"cells {cell:.1f} px apart"
    # a desktop keeps the names beside their strips and its legend
    assert desktop["yaxis"].get("showticklabels", True) and "annotations" not in desktop
    assert desktop.get("showlegend", True)
