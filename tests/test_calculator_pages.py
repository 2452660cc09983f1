"""Step 1's real models and setups, step 6's real hardware, and the lab's memory prediction, through AppTest."""

from __future__ import annotations

import itertools

import pytest

from lensa.models.configs import PRESETS
from lensa.models.estimators import how_others_count
from lensa.models.memory import activation_bytes_per_token_per_layer, training_memory
from lensa.models.speed import GPUS, days_to_train
from lensa.ui import i18n
from tests.conftest import requires_torch
from tests.pagetools import chart_specs, metrics, notices, open_page, scrub_frame, scrub_texts, unlinked


def gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def test_llama2_70b_zero3_over_8_gpus():
    at = open_page("memory", lang="en", model="llama2-70b", zero="3", gpus="8")
    params = PRESETS["llama2-70b"].published_params
    assert metrics(at)["Model states"] == gb(params * 16 / 8) == "138.0 GB"
    captions = [unlinked(c) for c in [c.value for c in at.caption] + scrub_texts(at, "caption")]
    assert any(c.startswith("68.98B × 16 B ÷ 8 = 138.0 GB of model states per GPU") for c in captions)
    assert any("ZeRO stage 3 over 8 GPUs splits everything" in unlinked(m.value) for m in at.markdown)


@pytest.mark.parametrize(
    ("params", "bpp"),
    [({"optimizer": "sgd_momentum"}, "12"), ({"optimizer": "adam_8bit"}, "10"), ({"precision": "fp32"}, "16")],
)
def test_optimizers_and_precision(params, bpp):
    assert metrics(open_page("memory", lang="en", **params))["Bytes per parameter"] == bpp


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stages_follow_the_paper(stage):
    model = PRESETS["llama2-7b"].shape()
    psi, n = model.params, 8
    paper = {1: 2 * psi + 2 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n, 3: 16 * psi / n}[stage]
    at = open_page("memory", lang="en", model="llama2-7b", zero=str(stage), gpus="8")
    assert metrics(at)["Model states"] == gb(paper)


def test_recomputation_and_stored_attention_scores_move_the_activations():
    base = metrics(open_page("memory", lang="en"))["Activations"]
    full = metrics(open_page("memory", lang="en", checkpointing="full"))["Activations"]
    stored = metrics(open_page("memory", lang="en", attention="stored"))["Activations"]
    model = PRESETS["chat7b"].shape()
    assert full == gb(training_memory(model, 2048, checkpointing="full").activations)
    assert stored == gb(training_memory(model, 2048, flash_attention=False).activations)
    assert float(full.split()[0]) < float(base.split()[0]) < float(stored.split()[0].replace(",", ""))


def test_gpu_memory_line_changes_the_verdict():
    at = open_page("memory", lang="en", model="gpt2", gpu_gb="24")
    assert any("fits on one 24 GB GPU" in m.value for m in at.markdown)
    spec = chart_specs(at)[0]
    assert spec["layout"]["shapes"][0]["y0"] == 24


def test_custom_size():
    at = open_page("memory", lang="en", model="custom", params="1e11")
    assert not at.exception and metrics(at)["Model states"] == "1,600.0 GB"
    assert at.query_params["params"] == "100e9"  # the same count, in the URL's one spelling


# The ZeRO paper's worked example (Rajbhandari et al. 2019, Figure 1): Psi = 7.5B, N_d = 64, K = 12.
ZERO_PAPER_GB_PER_GPU = {0: "120.0 GB", 1: "31.4 GB", 2: "16.6 GB", 3: "1.9 GB"}


@pytest.mark.parametrize("stage", sorted(ZERO_PAPER_GB_PER_GPU))
@pytest.mark.parametrize(("lang", "typed"), [("en", "7.5B"), ("id", "7,5 miliar"), ("en", "7.5e9")])
def test_zero_papers_worked_example_from_a_link(stage, lang, typed):
    at = open_page("memory", lang=lang, model="custom", params=typed, zero=str(stage), gpus="64")
    expected = ZERO_PAPER_GB_PER_GPU[stage]
    states = metrics(at)["Model states"]  # the same label in both languages
    assert states == (expected if lang == "en" else expected.replace(".", ","))
    assert at.query_params["params"] == "7.5e9" and notices(at) == []
    count = "7,500,000,000 parameters" if lang == "en" else "7.500.000.000 parameter"
    assert any(c.value.startswith(count) for c in at.caption)


@pytest.mark.parametrize(
    ("lang", "typed", "url", "count"),
    [
        ("en", "175e9", "175e9", "175,000,000,000 parameters"),  # GPT-3
        ("en", "1.3e9", "1.3e9", "1,300,000,000 parameters"),
        ("en", "7,500,000,000", "7.5e9", "7,500,000,000 parameters"),
        ("id", "175 miliar", "175e9", "175.000.000.000 parameter"),
        ("id", "7,5B", "7.5e9", "7.500.000.000 parameter"),
    ],
)
def test_a_typed_size_is_kept_exactly_and_shown_back(lang, typed, url, count):
    at = open_page("memory", lang=lang, model="custom")
    at.text_input[0].input(typed).run()
    assert not at.exception and notices(at) == [] and at.warning.len == 0
    assert at.query_params["params"] == url and at.text_input[0].value == typed
    assert any(c.value.startswith(count) for c in at.caption)
    # The URL it wrote opens the same page: the count, in the language's own short spelling.
    again = open_page("memory", lang=lang, model="custom", params=url)
    assert metrics(again) == metrics(at) and notices(again) == []
    assert again.text_input[0].value == i18n.compact_exact(float(url), lang)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_typed_junk_keeps_the_last_size_and_says_so(lang):
    at = open_page("memory", lang=lang, model="custom", params="175e9")
    before = metrics(at)
    at.text_input[0].input("a lot").run()
    assert not at.exception and metrics(at) == before and at.query_params["params"] == "175e9"
    assert at.text_input[0].value == i18n.compact_exact(175e9, lang)  # the box shows what the page uses
    assert [w.value for w in at.warning] == [
        i18n.text(lang, "common.typed_not_a_number", raw="a lot", value=i18n.compact_exact(175e9, lang))
    ]


def test_typed_size_past_the_range_is_clamped_and_says_so():
    at = open_page("memory", lang="en", model="custom")
    at.text_input[0].input("5T").run()
    assert not at.exception and at.query_params["params"] == "1e12"
    assert metrics(at)["Model states"] == gb(16e12)
    assert [w.value for w in at.warning] == ["`5T` is outside 100M … 1T, so the page uses the nearest end, 1T."]
    at.text_input[0].input("50M").run()
    assert at.query_params["params"] == "100e6" and "nearest end, 100M" in at.warning[0].value


@pytest.mark.parametrize(("raw", "lo_or_hi"), [("5T", "1T"), ("-3", "100M"), ("1e999", "1T")])
def test_a_links_size_past_the_range_is_clamped_with_a_notice(raw, lo_or_hi):
    at = open_page("memory", lang="en", model="custom", params=raw)
    assert not at.exception and at.text_input[0].value == lo_or_hi
    assert notices(at) == [
        f"The link asked for **Parameters** = `{raw}`, outside 100M … 1T; it shows the nearest end, {lo_or_hi}."
    ]


def test_how_others_count_table():
    at = open_page("memory", lang="en", model="llama2-7b", zero="2", gpus="8")
    table = next(m.value for m in at.markdown if m.value.startswith("| Calculator |"))
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    rows = {c[0]: c[2] for c in cells}
    assert rows["DeepSpeed ZeRO-2 estimator: 2 + 18 ÷ N"] == "26.67 GiB"
    assert rows["DeepSpeed ZeRO-3 estimator: 18 ÷ N + largest layer"] == "14.61 GiB"
    assert rows["accelerate, “training with Adam”, float32 (one device)"] == "98.46 GiB"
    ours = how_others_count(PRESETS["llama2-7b"].shape(), 8).row("lensa_zero2")
    assert metrics(at)["Model states"] == gb(ours.bytes)


def test_reference_figures_hold_with_the_setup_panel_closed():
    at = open_page("memory", lang="en")
    assert metrics(at) == {
        "Bytes per parameter": "16",
        "Model states": "107.8 GB",
        "Activations": "9.1 GB",
        "Total": "117.0 GB",
    }
    assert notices(at) == [] and dict(at.query_params) == {"lang": "en"}


# --- step 6 ---------------------------------------------------------------------


def bar_names(at, chart: int = 0) -> list[str]:
    """The labels of a bar chart's rows, top to bottom."""
    spec = chart_specs(at)[chart]
    return list(spec["layout"]["yaxis"]["ticktext"])


def test_v100_has_no_tf32_or_bf16():
    at = open_page("speed", lang="en", gpu="v100")
    assert bar_names(at) == ["FP32 (no tensor cores)", "FP16 mixed precision"]
    m = metrics(at)
    assert m["FP16 step"] == "3.3 s" and m["Speed-up over FP32"] == "8.0×"


def test_h100_adds_an_fp8_bar():
    at = open_page("speed", lang="en", gpu="h100")
    assert bar_names(at)[-1] == "FP8 tensor cores"
    assert bar_names(at, 1)[-1] == "BF16 mixed precision"  # FP8 training memory is not modelled


def test_mfu_budget_and_cluster():
    at = open_page("speed", lang="en", mfu="0.5", budget="1e12", cluster="512")
    m = metrics(at)
    days = days_to_train(6.74e9, 1e12, GPUS["a100"].peak("bf16"), 512, 0.5)
    assert m["Days for 1T tokens on 512 GPUs"] == f"{days:.3g} days"
    assert m["FP32 step"] == "17 s"  # 21.2 s at 40% becomes 17.0 s at 50%


def test_every_gpu_preset_renders_in_both_languages():
    for key in GPUS:
        for lang in ("en", "id"):
            at = open_page("speed", lang=lang, gpu=key)
            assert not at.exception and len(metrics(at)) == 6


# --- the lab's memory prediction --------------------------------------------------------


@requires_torch
def test_lab_predicts_what_autograd_keeps():
    at = open_page("lab", lang="en", width="64", depth="2", batch="64", steps="10", timeout=120)
    at.button(key="lab.run").click().run(timeout=120)
    table = at.dataframe[1].value
    predicted = list(table["Kept for backward, predicted (MB)"])
    measured = list(table["Kept for backward, measured (MB)"])
    assert predicted == measured and len(predicted) == 3
    assert set(table["Peak, measured (MB)"]) == {"not measured on CPU"}


# --- step 1's column: one scale for both precisions, labels apart at both widths -----------------------------------


def column(at) -> dict:
    """Step 1's chart block as the browser gets it (figure, caption, the phone's height and layout)."""
    return next(block for block in scrub_frame(at) if block["k"] == "chart")


@pytest.mark.parametrize("tokens", ["2048", "16384"])
def test_both_precisions_are_drawn_on_one_scale_so_fp32s_taller_column_looks_taller(tokens):
    model = PRESETS["chat7b"].shape()
    drawn = {}
    for precision in ("mixed", "fp32"):
        fig = column(open_page("memory", lang="en", precision=precision, tokens=tokens))["fig"]
        total = training_memory(model, int(tokens), precision).total / 1e9
        assert sum(bar["y"][0] for bar in fig["data"]) == pytest.approx(total)
        drawn[precision] = (fig["layout"]["yaxis"]["range"], total)
    (mixed_range, mixed_total), (fp32_range, fp32_total) = drawn["mixed"], drawn["fp32"]
    assert fp32_total > mixed_total
    assert mixed_range == fp32_range and fp32_range[1] >= fp32_total  # so FP32's column is the taller one drawn


def test_the_caption_says_how_each_precision_stores_its_activations():
    mixed = unlinked(column(open_page("memory", lang="en", precision="mixed"))["caption"])
    fp32 = unlinked(column(open_page("memory", lang="en", precision="fp32"))["caption"])
    assert "16-bit" in mixed.split("Activations")[1] and "FP32" not in mixed.split("Activations")[1]
    model = PRESETS["chat7b"].shape()
    doubled = activation_bytes_per_token_per_layer(model, "fp32") / activation_bytes_per_token_per_layer(model)
    assert doubled == 2 and "Activations in FP32: twice" in fp32


def label_gaps_px(layout: dict, plot_px: float) -> list[float]:
    """How far apart, in pixels, the column's neighbouring part labels are drawn (their text's y, bottom up)."""
    top = layout["yaxis"]["range"][1]
    ys = sorted(a.get("ay", a["y"]) for a in layout["annotations"])
    return [(b - a) / top * plot_px for a, b in itertools.pairwise(ys)]


@pytest.mark.parametrize(
    "params",
    [{"precision": "mixed"}, {"precision": "fp32"}, {"zero": "3", "gpus": "8"}, {"model": "llama2-70b"}],
)
@pytest.mark.parametrize("lang", ["en", "id"])
def test_part_labels_never_overlap_on_a_computer_or_a_phone(params, lang):
    block = column(open_page("memory", lang=lang, **params))
    layout = block["fig"]["layout"]
    desktop_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    assert min(label_gaps_px(layout, desktop_px)) >= 1.2 * layout["font"]["size"]
    compact = {**layout, **block["compact"]["layout"]}
    phone_px = block["compact"]["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    assert min(label_gaps_px(compact, phone_px)) >= 1.2 * compact["font"]["size"]
    # every label stays on the chart
    for lay in (layout, compact):
        assert all(0 <= a.get("ay", a["y"]) <= lay["yaxis"]["range"][1] for a in lay["annotations"])
