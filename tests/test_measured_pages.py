"""Steps 2-5 with measured data through AppTest: every step × every data source × both languages, the URL
controls of a recorded run, falling back with a notice, uploads good and bad, and the session's lab slot.

``data=reference`` reads the shipped reference run (lensa/data); the lab run and the uploads are the
synthetic runs of tests/runfixtures.py.
"""

from __future__ import annotations

import json
import math
import sys

import plotly.graph_objects as go
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from streamlit.testing.v1 import AppTest

from lensa.runstats import measured
from lensa.runstats.reference_run import load_reference
from lensa.ui import i18n, recorded_run
from lensa.ui.site import MEASURED_ONLY, PAGES_BY_KEY
from tests.pagetools import (
    APP,
    assert_whole_navigation,
    chart_specs,
    metrics,
    move_scrub,
    notices,
    open_page,
    page_keys,
)
from tests.runfixtures import reference_arms, upload_bytes
from tests.test_fuzz_links import _last, _plain_number, link_value

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

DATA_STEPS = page_keys(steps=True, control="data")  # the steps that can show a recorded run
SOURCES = ("illustration", "reference", "lab", "upload")


@pytest.fixture(autouse=True)
def fresh_reference_cache():
    recorded_run._load_reference.clear()
    yield
    recorded_run._load_reference.clear()


def visit(key: str, lang: str = "en", session: dict | None = None, **params: str) -> AppTest:
    """Like open_page, with session state set before the page's first run (the lab's slot)."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    for name, value in (session or {}).items():
        at.session_state[name] = value
    at.switch_page(PAGES_BY_KEY[key].file)
    for name, value in {"lang": lang, **params}.items():
        at.query_params[name] = value
    at.run()
    return at


def reference_tensors():
    """The run the pages read with data=reference (the shipped one, or the synthetic one in its place)."""
    return recorded_run.Source("reference", "reference", recorded_run.reference_run()[0]).tensors


def upload(at: AppTest, name: str = "my run.npz", content: bytes | None = None) -> AppTest:
    at.file_uploader[0].set_value((name, upload_bytes() if content is None else content, "application/zip")).run()
    return at


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def infos(at: AppTest) -> str:
    return "\n".join(i.value for i in at.info)


LAB = {recorded_run.LAB_RUN: ("lab-test", reference_arms())}


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize("data", SOURCES)
@pytest.mark.parametrize("key", DATA_STEPS)
def test_every_step_with_every_data_source(key, data, lang):
    session = LAB if data == "lab" else None
    at = visit(key, lang, session, data=data)
    if data == "upload":
        assert i18n.text(lang, "data.no_upload").split("`")[0] in infos(at)  # says what to do instead
        upload(at)
    assert not at.exception, at.exception
    assert notices(at) == []
    assert_whole_navigation(at, key, lang)  # step 2 with a recorded run once lost its own entry and the progress line
    charts = chart_specs(at)
    assert charts
    for chart in charts:
        go.Figure(chart)  # valid plotly
    if data == "illustration":
        assert metrics(at) == metrics(open_page(key, lang=lang))  # the seed's figures, untouched
        return
    line = {
        "reference": i18n.text(lang, "data.line_reference").split("(")[0],
        "lab": i18n.text(lang, "data.line_lab").split("(")[0],
        "upload": i18n.text(lang, "data.line_upload", name="my run.npz", what="").rstrip(", ."),
    }[data]
    assert line in captions(at)
    assert metrics(at) != metrics(open_page(key, lang=lang))
    shown = list(metrics(at).values())
    assert all(v and v != "—" for v in shown), shown


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_step3_names_the_two_loss_scales_and_replays_the_scaler(lang):
    fp32, fp16 = load_reference()
    bounds = measured.scale_bounds(measured.tensor_stats(fp32, "weight_grad", "all", fp32.steps("weight_grad")[-1]))
    keep, safe = f"2^{bounds.keep_k}", f"2^{bounds.safe_k}"
    at = visit("loss_scaling", lang, data="reference")
    text = "\n".join(m.value for m in at.markdown)
    assert f"**S = {keep}**" in text and f"**S = {safe}**" in text
    m = metrics(at)
    assert m[i18n.text(lang, "loss_scaling_data.metric_keep")] == keep
    assert m[i18n.text(lang, "loss_scaling_data.metric_safe")] == safe
    run = json.loads(at.get("plotly_chart")[-1].proto.spec)  # the replayed GradScaler history
    scales = fp16.loss_scales()
    assert run["data"][0]["x"] == list(scales) and run["data"][0]["y"][0] == math.log2(scales[1])
    assert run["data"][1]["x"] == fp16.skipped_steps() and fp16.skipped_steps()  # the real skipped steps, marked ×
    assert i18n.text(lang, "data.recipe_title") in [e.label for e in at.expander]  # its recipe, one click away


def test_step3_scale_slider_moves_the_real_shares():
    at = visit("loss_scaling", data="reference", scale="0")
    before = metrics(at)["Rounded to 0"]
    at = visit("loss_scaling", data="reference", scale="14")
    assert metrics(at)["Rounded to 0"] != before
    assert at.query_params["scale"] in ("14", ["14"])


@pytest.mark.parametrize(
    ("key", "expect"),
    [
        ("fp16_range", "Overflow to inf"),
        ("master_weights", "Updates lost, FP32 master"),
        ("bf16", "Mean relative error BF16"),
    ],
)
def test_measured_cards(key, expect):
    m = metrics(visit(key, data="reference"))
    assert expect in m
    if key == "master_weights":
        assert m["Updates lost, FP32 master"] == "0%"
        assert float(m["Updates lost, FP16 weight"].rstrip("%")) < float(m["Updates lost, BF16 weight"].rstrip("%"))


def test_kind_layer_and_step_come_from_the_url_and_go_back_to_it():
    run = reference_tensors()
    layer = run.names("activation_grad")[1]
    step = run.steps("activation_grad")[0]
    at = visit("fp16_range", data="reference", kind="activation_grad", layer=layer, step=str(step))
    assert notices(at) == []
    assert at.selectbox(key="w.fp16_range.kind").value == "activation_grad"
    assert at.selectbox(key="w.fp16_range.layer").value == layer
    assert at.select_slider(key="w.fp16_range.step").value == step
    assert f"`{layer}`" in captions(at) and f"step {step}" in captions(at)
    assert "activation gradients" in captions(at)
    at.select_slider(key="w.fp16_range.step").set_value(run.steps("activation_grad")[-1]).run()
    assert at.query_params["step"] in (str(run.steps("activation_grad")[-1]), [str(run.steps("activation_grad")[-1])])


@pytest.mark.parametrize(
    ("param", "raw"),
    [("kind", "gradients"), ("kind", "<b>x</b>"), ("layer", "no.such.layer"), ("step", "abc"), ("step", "1e9")],
)
def test_junk_measured_values_fall_back_with_a_notice(param, raw):
    at = visit("loss_scaling", data="reference", **{param: raw})
    assert not at.exception
    assert len(notices(at)) == 1 and "<b>" not in notices(at)[0]
    kind = at.selectbox(key="w.loss_scaling.kind").value
    assert kind == "weight_grad"
    assert at.selectbox(key="w.loss_scaling.layer").value == "all"
    steps = at.select_slider(key="w.loss_scaling.step").options
    assert str(at.select_slider(key="w.loss_scaling.step").value) == steps[-1]  # the last step, or the hi end


def test_junk_data_falls_back_to_the_illustration_with_a_notice():
    at = visit("bf16", data="measured")
    assert len(notices(at)) == 1 and metrics(at) == metrics(open_page("bf16", lang="en"))


def test_kind_and_step_are_ignored_with_the_illustration():
    at = visit("fp16_range", kind="activation", step="3")
    assert notices(at) == [] and metrics(at) == metrics(open_page("fp16_range", lang="en"))


def test_changing_the_kind_resets_the_layer():
    run = reference_tensors()
    at = visit("bf16", data="reference", layer=run.names("weight_grad")[0])
    assert at.selectbox(key="w.bf16.layer").value == run.names("weight_grad")[0]
    at.selectbox(key="w.bf16.kind").set_value("activation").run()
    assert not at.exception and notices(at) == []
    assert at.selectbox(key="w.bf16.layer").value == "all"
    assert at.query_params.get("layer") is None and at.query_params["kind"] in ("activation", ["activation"])


def test_step4_offers_updates_only():
    at = visit("master_weights", data="reference", kind="weight_grad")
    assert len(notices(at)) == 1
    assert at.selectbox(key="w.master_weights.kind").options == [i18n.text("en", "data.kind_update")]


def test_reference_unavailable_says_so(monkeypatch):
    import lensa.runstats

    # the import fails as if the module did not exist
    monkeypatch.setitem(sys.modules, "lensa.runstats.reference_run", None)
    monkeypatch.delattr(lensa.runstats, "reference_run", raising=False)
    recorded_run._load_reference.clear()
    at = visit("loss_scaling", "id", data="reference")
    assert not at.exception
    assert i18n.text("id", "data.reference_missing").split(",")[0] in infos(at)
    assert metrics(at) == metrics(open_page("loss_scaling", lang="id"))  # the illustration instead


def test_no_lab_run_says_what_to_do():
    at = visit("bf16", "id", data="lab")
    assert i18n.text("id", "data.no_lab").split(",")[0] in infos(at)
    assert any(link.proto.label == i18n.text("id", "data.lab_link") for link in at.main.get("page_link"))


def test_set_lab_run_fills_the_session_slot():
    def script():
        import streamlit as st

        from lensa.ui import recorded_run
        from tests.runfixtures import reference_arms

        if recorded_run.lab_run() is None:
            recorded_run.set_lab_run(tuple(reference_arms().values()))  # as the lab hands over its arms
        st.markdown(", ".join(sorted(recorded_run.lab_run()[1])))

    at = AppTest.from_function(script).run()
    assert not at.exception and at.markdown[0].value == "fp16, fp32"
    assert recorded_run._arms(reference_arms()["fp16"]) == {"fp16": reference_arms()["fp16"]}
    with pytest.raises(TypeError):
        recorded_run._arms({"x": 1})


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_bad_upload_says_why_in_the_page_language(lang):
    at = visit("fp16_range", lang, data="upload")
    upload(at, "notes.npz", b"this is not a zip file")
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1
    assert errors[0].startswith(i18n.text(lang, "data.upload_error", name="notes.npz", detail="").split("“")[0])
    assert "zip" in errors[0] and "Traceback" not in errors[0]


def test_an_upload_stays_for_the_session_across_steps():
    at = visit("fp16_range", data="upload")
    upload(at, "run-7.npz")
    at.switch_page("pages/bf16.py")
    at.query_params.clear()
    at.query_params.update({"lang": "en", "data": "upload"})
    at.run()
    assert not at.exception
    assert "“run-7.npz”" in captions(at)


def test_illustration_loads_nothing(monkeypatch):
    def fail():
        raise AssertionError("the illustration must not load a run")

    monkeypatch.setattr(recorded_run, "reference_run", fail)
    at = visit("loss_scaling", scale="3")
    assert not at.exception
    move_scrub(at, "scale", 5)
    assert not at.exception and at.query_params["scale"] in ("5", ["5"])


def test_markdown_escape_keeps_file_text_plain():
    assert recorded_run.md_escape("tok_emb.*[x](y) $a$\n<b>") == r"tok\_emb.\*\[x\](y) \$a\$ \<b\>"
    assert recorded_run.md_escape("x" * 100, limit=10) == "x" * 10 + "…"


def test_an_upload_name_with_markdown_is_shown_as_typed():
    at = visit("fp16_range", data="upload")
    upload(at, "my_run_*v2*.npz")
    assert r"“my\_run\_\*v2\*.npz”" in captions(at)


def test_a_new_link_keeps_its_layer_when_the_kind_changes():
    run = reference_tensors()
    at = visit("bf16", data="reference", kind="weight_grad")
    layer = run.names("activation")[2]
    at.query_params.update({"kind": "activation", "layer": layer})  # Back, or another shared link
    at.run()
    assert at.selectbox(key="w.bf16.layer").value == layer and notices(at) == []


# --- fuzzed links with a recorded run ---------------------------------------------------------------------

_fuzz_apps: dict[str, AppTest] = {}


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(params=hst.fixed_dictionaries({}, optional=dict.fromkeys(MEASURED_ONLY, link_value)))
def test_measured_links_fuzzed(params):
    if "at" not in _fuzz_apps:
        _fuzz_apps["at"] = visit("loss_scaling", data="reference")
    at = _fuzz_apps["at"]
    at.session_state["lensa.seen"] = {}  # a newly opened link
    at.query_params.clear()
    at.query_params.update({"lang": "en", "data": "reference", **params})
    at.run(timeout=60)
    assert not at.exception, (params, at.exception)
    texts = notices(at)
    run = reference_tensors()
    kind = at.selectbox(key="w.loss_scaling.kind").value
    layer = at.selectbox(key="w.loss_scaling.layer").value
    step = at.select_slider(key="w.loss_scaling.step")
    kinds = [k for k in PAGES_BY_KEY["loss_scaling"].control("kind").options if run.steps(k)]
    for name, value, options in (("kind", kind, kinds), ("layer", layer, ["all", *run.names(kind)])):
        assert value in options
        if name not in params:
            continue
        raw = _last(params[name])
        usable = len(raw) <= 64 and raw.strip().lower() in {o.lower() for o in options}
        flagged = any(f"**{i18n.text('en', f'data.{name}')}**" in t for t in texts)
        assert flagged == (not usable), (name, raw, texts)
    steps = [int(s) for s in step.options]
    assert int(step.value) in steps
    if "step" in params:
        raw = _last(params["step"])
        number = _plain_number(raw) if len(raw) <= 64 else None
        flagged = any(f"**{i18n.text('en', 'data.step')}**" in t for t in texts)
        if number is None:
            assert flagged and int(step.value) == steps[-1]
        elif number < steps[0] or number > steps[-1]:
            assert flagged and int(step.value) in (steps[0], steps[-1])
        else:
            assert not flagged and int(step.value) == min(steps, key=lambda s: abs(s - number))
    assert len(texts) <= len(params)


def test_the_data_choice_carries_to_the_other_steps():
    at = visit("fp16_range", data="reference")
    targets = {e.proto.page: e.proto.query_string for e in at.get("page_link")}
    into = {
        page: q for page, q in targets.items() if any(k in page for k in ("loss_scaling", "master_weights", "bf16"))
    }
    assert into and all("data=reference" in q for q in into.values()), targets
    assert not any("data=" in q for page, q in targets.items() if "memory" in page or "speed" in page)


def _percent_value(text: str, lang: str) -> float:
    return float(text.removesuffix("%").replace(".", "").replace(",", ".") if lang == "id" else text[:-1])


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
@pytest.mark.parametrize("kind", PAGES_BY_KEY["fp16_range"].control("kind").options)
def test_step2s_cards_of_a_recorded_run_add_up_to_100(kind, lang):
    """Issue 41: the four zones' cards are one whole, rounded together (they read 101% once)."""
    at = visit("fp16_range", data="reference", kind=kind, lang=lang)
    cards = metrics(at)
    labels = ["metric_zero", "metric_subnormal", "metric_normal"]
    texts = [cards[i18n.text(lang, f"fp16_range.{k}")] for k in labels]
    texts.append(cards[i18n.text(lang, "fp16_range_data.metric_overflow")])
    assert math.isclose(sum(_percent_value(t, lang) for t in texts), 100, abs_tol=1e-9), texts
