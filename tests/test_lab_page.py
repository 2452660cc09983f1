"""The live lab and the live parts of steps 3 and 6, through AppTest on this machine's CPU."""

from __future__ import annotations

import csv
import io
import json

import pytest

from lensa.models.scaling import dynamic_run
from lensa.ui import i18n, recorded_run
from tests.conftest import requires_torch
from tests.pagetools import metrics, open_page
from tests.test_live import CSV_COLUMNS

pytestmark = requires_torch

TINY = {"width": "64", "depth": "1", "batch": "64", "steps": "10"}


def test_lab_shows_the_machine_and_an_estimate():
    at = open_page("lab", lang="en", **TINY)
    assert not at.exception
    assert any(m.value.startswith("This machine: **") for m in at.markdown)
    assert any("parameters · about" in c.value for c in at.caption)
    assert at.button(key="lab.run").disabled is False


def test_lab_runs_a_tiny_comparison_and_keeps_the_results():
    at = open_page("lab", lang="en", timeout=120, **TINY)
    at.button(key="lab.run").click().run(timeout=120)
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["Arm"]) == ["FP32 baseline", "FP16 autocast + GradScaler", "BF16 autocast"]
    assert table["Speed-up over FP32"].iloc[0] == "1.0×"
    assert at.button(key="lab.stop").disabled and not at.button(key="lab.run").disabled  # the run has ended
    assert all(v == "not measured on CPU" for v in table["Peak memory (MB)"])
    assert set(metrics(at)) == {"BF16 speed-up", "FP16 speed-up", "Final loss, BF16 − FP32", "FP16 steps skipped"}
    proof = next(m.value for m in at.markdown if "Inside autocast" in m.value)
    assert "**float16** in the FP16 arm" in proof and "**bfloat16** in the BF16 arm" in proof
    assert "**float32** in FP32" in proof and "loss stayed **float32**" in proof
    assert len(at.get("plotly_chart")) == 2  # loss curves and the FP16 arm's scale
    # what the results say is said in a learner's words: no module path or script (issue 29)
    from tests.test_fact_check_29 import CODE_WORDS

    shown = [e.value for kind in ("markdown", "caption", "info", "warning", "error", "success") for e in at.get(kind)]
    assert i18n.text("en", "lab.memory_caption") in shown
    assert [s for s in shown if CODE_WORDS.search(s)] == []
    # An arm the worker's calibration found emulated and slower than FP32 in this run (past the 1.1x noise) is
    # said to be, with why; any other is not.
    from lensa.live.worker import default_worker

    clock = default_worker().clock("cpu")
    speed = dict(zip(table["Arm"], table["Speed-up over FP32"], strict=True))
    for arm, label in (("fp16", "FP16 autocast + GradScaler"), ("bf16", "BF16 autocast")):
        ratio = float(speed[label].rstrip("×"))
        said = [i.value for i in at.info if i.value.startswith(f"On this CPU, {label} ran at")]
        if not clock.emulated(arm):
            assert not said
        elif ratio < 1 / 1.1 / 1.05:  # the table rounds to 2 significant digits
            assert len(said) == 1 and "converts the 16-bit inputs of every matrix product to FP32" in said[0]
        elif ratio > 1 / 1.1 * 1.05:
            assert not said
    csv = at.get("download_button")[0]
    assert csv is not None
    # the results stay when another control moves
    at.select_slider(key="w.lab.lr").set_value(3e-3).run(timeout=120)
    assert at.dataframe and at.dataframe[0].value["Arm"].iloc[0] == "FP32 baseline"


def test_the_offered_csv_holds_the_table_the_page_shows(monkeypatch):
    # AppTest keeps a download's bytes in an in-memory media store it drops after each run: keep them.
    import streamlit.testing.v1.app_test as app_test
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    stores: list[MemoryMediaFileStorage] = []

    def keeping(*args, **kwargs):
        stores.append(MemoryMediaFileStorage(*args, **kwargs))
        return stores[-1]

    monkeypatch.setattr(app_test, "MemoryMediaFileStorage", keeping)
    at = open_page("lab", lang="en", timeout=120, **TINY)
    at.button(key="lab.run").click().run(timeout=120)
    assert not at.exception and not at.error
    button = at.get("download_button")[0]
    file = stores[-1].get_file(button.proto.url.rsplit("/", 1)[-1])
    assert file.mimetype == "text/csv" and file.filename == "lensa-live-comparison.csv"
    rows = list(csv.DictReader(io.StringIO(file.content.decode())))
    shown = at.dataframe[0].value
    assert list(rows[0]) == CSV_COLUMNS
    assert [r["arm"] for r in rows] == ["fp32", "fp16", "bf16"] and len(shown) == 3
    for row, (_, cells) in zip(rows, shown.iterrows(), strict=True):
        # the file's full-precision numbers, written as the page writes them, are the table's
        assert cells["Arm"] == i18n.text("en", f"lab.arm_{row['arm']}")
        assert cells["Final loss"] == i18n.number(float(row["final_loss"]), "en", 4)
        assert cells["Accuracy"] == i18n.percent(float(row["accuracy"]), "en")
        assert cells["Speed-up over FP32"] == i18n.ratio(float(row["speedup_vs_fp32"]), "en")
        assert cells["Skipped steps"] == i18n.number(int(row["skipped_steps"]), "en")
        assert cells["Kept for backward (MB)"] == i18n.number(float(row["saved_for_backward_mb"]), "en", 1)
        assert row["peak_memory_mb"] == ""  # the table's "not measured on CPU"


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_finished_run_can_be_shown_in_the_lesson(lang):
    at = open_page("lab", lang=lang, timeout=120, **TINY)
    assert not [b for b in at.button if b.key == "lab.show_in_lesson"]  # nothing to show before a run
    at.button(key="lab.run").click().run(timeout=120)
    assert not at.exception and not at.error
    note = i18n.text(lang, "lab.recorded_note", n="8", steps="10")
    assert any(c.value == note for c in at.caption)  # 8 of the 10 steps recorded, off the clock
    button = at.button(key="lab.show_in_lesson")
    assert button.label == i18n.text(lang, "lab.show_in_lesson")
    button.click().run(timeout=60)
    assert not at.exception, at.exception
    # Step 2, with this run: its caption names the lab run and the URL says data=lab, in the same language.
    assert at.query_params["data"] in ("lab", ["lab"]) and at.query_params["lang"] in (lang, [lang])
    assert at.selectbox(key="w.fp16_range.kind").value == "weight_grad"
    line = i18n.text(lang, "data.line_lab").split("(")[0]
    assert any(line in c.value for c in at.caption), [c.value for c in at.caption]
    _ident, lab = at.session_state[recorded_run.LAB_RUN]
    assert sorted(lab) == ["bf16", "fp16", "fp32"]
    assert all(run.meta["source"] == "lab" for run in lab.values())
    # Step 3 replays the FP16 arm's loss scale from the same run.
    at.switch_page("pages/loss_scaling.py")
    at.query_params.update({"lang": lang, "data": "lab"})
    at.run(timeout=60)
    assert not at.exception, at.exception
    assert any(i18n.text(lang, "data.scaler_lab") in c.value for c in at.caption), [c.value for c in at.caption]


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_past_the_servers_recordings_budget_a_run_is_shown_but_its_recordings_are_not_kept(lang, monkeypatch):
    from lensa.ui import limits

    ledger = limits.RecordingsLedger(budget=1000, alive=lambda _s: True)  # less than one tiny run's recordings
    monkeypatch.setattr(limits, "RECORDINGS", ledger)
    at = open_page("lab", lang=lang, timeout=120, **TINY)
    at.button(key="lab.run").click().run(timeout=120)
    assert not at.exception and not at.error
    assert at.dataframe and len(at.dataframe[0].value) == 3  # the results themselves are all there
    assert any(i.value == i18n.text(lang, "limits.recordings_busy") for i in at.info)
    assert not [b for b in at.button if b.key == "lab.show_in_lesson"]
    assert ledger.held() == 0
    # the next run of the page says the same about the same run, and nothing more is counted
    at.select_slider(key="w.lab.lr").set_value(3e-3).run(timeout=120)
    assert any(i.value == i18n.text(lang, "limits.recordings_busy") for i in at.info)
    assert ledger.held() == 0


def test_the_recordings_ledger_counts_each_session_once_and_forgets_ended_ones():
    from lensa.ui import limits

    alive = {"a", "b"}
    ledger = limits.RecordingsLedger(budget=100, alive=lambda s: s in alive)
    assert ledger.keep("a", 60) and ledger.held() == 60
    assert ledger.keep("a", 70) and ledger.held() == 70  # a session's new run replaces its last
    assert not ledger.keep("b", 40) and ledger.held() == 70
    alive.discard("a")
    assert ledger.keep("b", 40) and ledger.held() == 40


def test_lab_defaults_come_from_this_machines_clock():
    from lensa import live
    from lensa.live.worker import default_worker

    at = open_page("lab", lang="en", timeout=120)
    assert not at.exception
    clock = default_worker().clock("auto")  # the worker AppTest's script asked: it runs in this process
    chosen = live.defaults_for(clock)
    shown = {name: int(at.select_slider(key=f"w.lab.{name}").value) for name in ("width", "batch", "steps")}
    assert shown == {"width": chosen.width, "batch": chosen.batch_size, "steps": chosen.steps}
    said = [c.value for c in at.caption if c.value.startswith("On this machine the defaults are")]
    assert len(said) == (chosen != live.RunConfig(device=clock.device, record=True))
    # A link's own settings win over the calibrated defaults.
    linked = open_page("lab", lang="en", timeout=120, width="1024")
    assert int(linked.select_slider(key="w.lab.width").value) == 1024


def test_lab_refuses_a_run_that_would_take_too_long():
    at = open_page("lab", lang="id", width="4096", depth="6", batch="8192", steps="300")
    assert not at.exception
    assert at.button(key="lab.run").disabled is True
    assert any("lebih dari" in w.value for w in at.warning)


def test_lab_asks_for_cuda_without_cuda_in_plain_words():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    at = open_page("lab", lang="en", device="cuda", **TINY)
    assert not at.exception
    assert any("no usable NVIDIA GPU" in e.value for e in at.error)
    assert at.button(key="lab.run").disabled is True


def test_lab_trace_matches_the_simulator():
    at = open_page("lab", lang="en", timeout=120, trace_k="30", trace_spike="10")
    at.button(key="lab.trace_run").click().run(timeout=120)
    assert not at.exception
    assert [b for b in at.button if b.key == "lab.trace_cancel"] == []  # the trace has ended: no Cancel
    assert any(s.value.startswith("The prediction matched the real scaler at all 24 steps") for s in at.success)


def test_step3_real_gradscaler_follows_the_illustration():
    at = open_page("loss_scaling", lang="en", timeout=120)
    at.button(key="loss_scaling.real_run").click().run(timeout=120)
    assert not at.exception
    run = dynamic_run()
    overflowed = ", ".join(str(s.step) for s in run if s.found_inf)
    assert any(f"overflowed at steps {overflowed} and its scale followed" in m.value for m in at.markdown)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)  # the run's chart (the histogram is the scrub's)
    real = next(d for d in spec["data"] if d.get("name") == "real GradScaler")
    assert len(real["y"]) == len(run)


def test_step6_measures_this_machine():
    at = open_page("speed", lang="en", timeout=120)
    at.button(key="speed.measure").click().run(timeout=120)
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["Precision"]) == ["FP32", "TF32", "BF16", "FP16"]
    measured = dict(zip(table["Precision"], table["Measured here (TFLOP/s)"], strict=True))
    sizes = dict(zip(table["Precision"], table["Size measured (n × n)"], strict=True))
    # Numbers stay numbers on every CPU: an emulated format's smaller size is in its own column.
    rates = {m: float(measured[m].replace(",", "")) for m in ("FP32", "BF16", "FP16")}
    assert all(r > 0 for r in rates.values())
    n = {m: int(sizes[m].replace(",", "")) for m in ("FP32", "BF16", "FP16")}
    # Each mode at the largest size up to 2048 whose one product fits the budget: on a loaded machine (the worker
    # runs at the lowest priority) even FP32 can stop short of 2048, so only the doubling sizes are certain.
    assert all(v in (256, 512, 1024, 2048) for v in n.values()), n
    assert measured["TF32"] == "no TF32 on a CPU" and sizes["TF32"] == "—"
    assert list(table["NVIDIA A100 SXM 80GB datasheet (TFLOP/s)"]) == ["19.5", "156", "312", "312"]
    said = [m.value for m in at.markdown if "the NVIDIA A100 SXM 80GB datasheet ratio is 16×" in m.value]
    assert len(said) == 1
    # the sentence names the sizes the table says BF16 and FP32 were measured at, and their ratio
    assert f"{sizes['BF16']} × {sizes['BF16']}" in said[0] and f"{sizes['FP32']} × {sizes['FP32']}" in said[0]
    assert i18n.ratio(rates["BF16"] / rates["FP32"], "en") in said[0]
    assert [b for b in at.button if b.key == "speed.measure_cancel"] == []  # the run has ended: no Cancel
    # A 16-bit format measured slower than FP32 (past the timing noise) is said to be, with the ratio and why.
    notes = [i.value for i in at.info if "product took" in i.value]
    for mode in ("BF16", "FP16"):
        slower = rates["FP32"] / rates[mode]
        said = [t for t in notes if f"one {mode} product took" in t]
        if slower > 1.1 * 1.05:  # the page's 1.1, past the 3 significant digits the table rounds to
            assert len(said) == 1 and "converts the inputs to FP32" in said[0]
        elif slower < 1.1 / 1.05:
            assert not said


def test_the_emulation_words_name_the_ratio_and_the_reason():
    from dataclasses import replace
    from types import SimpleNamespace

    from lensa import live
    from lensa.ui import live_view
    from lensa.ui.frame import Page
    from lensa.ui.site import PAGES_BY_KEY

    clock = live.CostModel(
        "cpu",
        {"fp32": 1e11, "fp16": 5e9, "bf16": 5e10},
        {a: 1e-8 for a in live.ARMS},
        {a: 1e-4 for a in live.ARMS},
        0.05,
        slowdown={"fp32": 1.0, "fp16": 20.0, "bf16": 2.0},
        capability="DEFAULT",
        cpu_flags=("avx512_bf16",),
    )

    def arm(t):
        return SimpleNamespace(time_s=t)

    run = SimpleNamespace(device="cpu", arms={"fp32": arm(1.0), "fp16": arm(25.0), "bf16": arm(0.5)})
    for lang in i18n.LANGUAGES:
        page = Page(PAGES_BY_KEY["lab"], lang)
        notes = live_view.emulation_notes(page, run, clock)
        assert len(notes) == 1  # BF16 was faster in this run, so only FP16 is named
        assert i18n.ratio(1 / 25, lang) in notes[0] and i18n.ratio(1 / 20, lang) in notes[0]
        assert "amx_fp16, avx512_fp16" in notes[0]
        # BF16 slower where the CPU has avx512_bf16 but torch's kernels do not use it
        slow_bf16 = SimpleNamespace(device="cpu", arms={"fp32": arm(1.0), "bf16": arm(3.0)})
        (note,) = live_view.emulation_notes(page, slow_bf16, clock)
        assert "avx512_bf16" in note and "DEFAULT" in note
        assert live_view.emulation_notes(page, SimpleNamespace(device="cuda", arms=run.arms), clock) == []
        # Slower in one run but not emulated (a tiny model pays autocast's casts): no such words.
        native = replace(clock, slowdown={"fp32": 1.0, "fp16": 20.0, "bf16": 0.4})
        assert len(live_view.emulation_notes(page, slow_bf16, native)) == 0
        # The worker's refusal of a run over the limit reaches the page with its numbers, in the page's language.
        refused = live_view.error_text(page, live.LiveError("too_long", "…", (45.0, 30.0)))
        assert refused == i18n.text(
            lang, "live.error_too_long", seconds=i18n.seconds(45.0, lang), limit=i18n.seconds(30.0, lang)
        )


def test_lab_says_busy_at_once_when_the_queue_is_full():
    from dataclasses import replace

    from lensa import live
    from lensa.live.worker import MAX_WAITING, default_worker

    worker = default_worker()  # the one AppTest's script uses too: it runs in this process
    held = live.RunConfig(width=64, depth=2, batch_size=128, features=16, eval_size=512, device="cpu")
    queued = [worker.submit("compare", config=replace(held, steps=1000))]
    queued += [worker.submit("compare", config=replace(held, steps=5)) for _ in range(MAX_WAITING)]
    try:
        at = open_page("lab", lang="id", timeout=120, **TINY)
        at.button(key="lab.run").click().run(timeout=30)
        assert not at.exception
        assert [e.value for e in at.error] == ["Lab sedang sibuk: coba lagi sekitar satu menit lagi."]
        assert not at.dataframe
    finally:
        for job in reversed(queued):
            job.cancel()
    for job in queued:
        assert job.wait(lambda _j: None, poll_s=0.05, timeout_s=60)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_a_worker_that_does_not_answer_in_time_is_said_with_a_way_to_try_again(lang, monkeypatch):
    from lensa import live
    from lensa.live.worker import LabWorker
    from lensa.ui import jobs

    def not_ready(self, device="auto", timeout_s=0.0):
        raise live.LiveError("not_ready", "…", (jobs.PAGE_WAIT_S,))

    monkeypatch.setattr(LabWorker, "known", lambda self, device="auto": False)
    monkeypatch.setattr(LabWorker, "device_info", not_ready)
    at = open_page("lab", lang=lang, **TINY)
    assert not at.exception
    expected = i18n.text(lang, "live.error_not_ready", seconds=i18n.seconds(jobs.PAGE_WAIT_S, lang))
    assert [e.value for e in at.error] == [expected]
    assert at.button(key="lab.run").disabled is True
    again = at.button(key="lab.try_again")
    assert again.label == i18n.text(lang, "live.try_again")
    monkeypatch.undo()  # the worker answers now
    again.click().run(timeout=120)
    assert not at.exception and not at.error
    assert at.button(key="lab.run").disabled is False


def test_lab_trains_the_recipes_below_16_bits(monkeypatch):
    """The recipes' comparison: every arm of the chosen group in the table, beside FP32 and BF16, each recipe's
    chart over theirs, one recipe's layers, the CSV; sized down here to the smallest candidate."""
    from lensa.live import config
    from lensa.ui.live_view import RECIPE_GROUPS

    monkeypatch.setattr(config, "RECIPES_CANDIDATES", ((64, 64, 10),))
    at = open_page("lab", lang="en", timeout=120, recipes="fp4", **TINY)
    assert any(
        c.value.startswith(f"{len(RECIPE_GROUPS['fp4'])} arms · a width of 64, a batch of 64, 10 steps")
        for c in at.caption
    )
    at.button(key="lab.recipes_run").click().run(timeout=180)
    assert not at.exception and not at.error, at.exception
    table = at.dataframe[0].value
    labels = [i18n.text("en", f"lab.arm_{a}") for a in RECIPE_GROUPS["fp4"]]
    assert list(table["Arm"]) == labels
    assert table["Gap to BF16"].iloc[1] == "+0.0 %"  # BF16 against itself
    assert table["Most flushed"].iloc[0] == "—" and table["Most flushed"].iloc[2] != "—"
    close = i18n.text("en", "lab.recipes_metric_close", within=i18n.percent(0.01, "en"))
    assert set(metrics(at)) >= {close, "Diverged"}
    facets = at.get("plotly_chart")[-1]
    spec = json.loads(facets.proto.spec)
    recipes = [t["name"] for t in spec["data"] if t["name"] in labels[2:]]
    assert recipes == labels[2:]  # one chart each, with FP32's and BF16's lines in every one
    assert len(spec["data"]) == 3 * len(recipes)
    layers = at.dataframe[1].value
    assert list(layers.columns) == ["Layer", "Tensor", "Values", "Flushed", "Saturated"]
    assert set(layers["Tensor"]) == {"x", "w", "dy"}
    assert any(m.value == "**NVFP4, NVIDIA's recipe: what each layer's tensors lost**" for m in at.markdown)
    at.selectbox(key="lab.recipe_layers").set_value("nvfp4_sr").run(timeout=60)
    assert any(m.value == "**NVFP4 + stochastic rounding: what each layer's tensors lost**" for m in at.markdown)


@pytest.mark.parametrize("lang", ["en", "id"])
def test_step6s_ratio_names_each_modes_size_and_keeps_a_small_ratios_digits(lang):
    from lensa.models.speed import GPUS
    from lensa.ui import live_view
    from lensa.ui.frame import Page
    from lensa.ui.site import PAGES_BY_KEY

    page = Page(PAGES_BY_KEY["speed"], lang)
    gpu = GPUS["a100"]

    def row(mode: str, size: int, tflops: float) -> dict:
        return {"mode": mode, "device": "cpu", "size": size, "tflops": tflops}

    # the run: BF16 emulated at 512 x 512, 57 times slower than FP32 at 2,048 x 2,048
    text = live_view.matmul_ratio_text(page, [row("fp32", 2048, 0.57), row("bf16", 512, 0.01)], "bf16", gpu)
    assert text is not None
    n32, n16 = i18n.number(2048, lang), i18n.number(512, lang)
    assert f"{n16} × {n16}" in text and f"{n32} × {n32}" in text
    assert i18n.ratio(1 / 57, lang) in text and ("0,0×" if lang == "id" else "0.0×") not in text
    same = live_view.matmul_ratio_text(page, [row("fp32", 2048, 1.0), row("bf16", 2048, 2.0)], "bf16", gpu)
    assert same == i18n.text(
        lang, "speed.measure_ratio", n=n32, mode="BF16", gpu=gpu.name, ratio=i18n.ratio(2.0, lang), datasheet="16×"
    )
    assert live_view.matmul_ratio_text(page, [row("fp32", 2048, 1.0)], "bf16", gpu) is None


# What Transformer Engine's get_default_fp8_recipe() returns (transformer_engine/pytorch/fp8.py, 2.x): MXFP8 block
# scaling where MXFP8 is supported (Blackwell), current scaling on compute capability 12.x, delayed scaling
# otherwise, so on the FP8 GPUs before Blackwell: Hopper (9.0) and Ada (8.9).
TE_DELAYED_DEFAULT_ON = ("Hopper", "Ada")


@pytest.mark.parametrize("lang", ["en", "id"])
def test_the_recipes_intro_says_on_which_gpus_delayed_scaling_is_transformer_engines_default(lang):
    intro = i18n.text(lang, "lab.recipes_intro")
    default = {"en": "Transformer Engine's default on", "id": "bawaan Transformer Engine pada"}[lang]
    assert default in intro  # a default with its hardware, never "by default" alone
    said = intro.split(default)[1].split(",")[0]
    assert all(gpu in said for gpu in TE_DELAYED_DEFAULT_ON)
