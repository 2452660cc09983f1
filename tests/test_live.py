"""lensa.live: real FP32 / FP16 / BF16 training runs, the matmul benchmark, the GradScaler trace, the run slot."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from lensa import live
from lensa.models.scaling import simulate
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

ROOT = Path(__file__).resolve().parents[1]

# Small enough that a whole three-arm comparison takes well under a second on a 2-core CPU.
TINY = live.RunConfig(
    width=64, depth=2, batch_size=128, features=16, steps=20, warmup_steps=2, lr=1e-2, eval_size=512, device="cpu"
)

# BF16 keeps 8 significand bits, so its logits and gradients differ from FP32 by ~0.4 % per op;
# over 20 Adam steps the final losses stay within this absolute gap (observed: ~1e-3).
LOSS_TOLERANCE = 0.02


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _cuda()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU; this machine has none")


# A made-up clock for the estimate's arithmetic (round numbers, not a measurement of any machine): what the lab
# really uses is measured by lensa.live.clock.calibrate, tested below and in tests/test_worker.py.
CLOCK = live.CostModel(
    device="cpu",
    flop_per_s={"fp32": 1e11, "fp16": 5e9, "bf16": 2e11},
    param_step_s={"fp32": 1e-8, "fp16": 1.2e-8, "bf16": 1.2e-8},
    layer_step_s={"fp32": 1e-4, "fp16": 1e-4, "bf16": 1e-4},
    arm_s=0.05,
    data_value_s=3e-9,
    record_value_s=2e-8,
    record_tensor_s=5e-4,
    slowdown={"fp32": 1.0, "fp16": 20.0, "bf16": 0.5},
    capability="AVX512",
    cpu_flags=("avx512_bf16",),
)
FAST = replace(CLOCK, flop_per_s={"fp32": 1e12, "fp16": 1e12, "bf16": 1e12}, slowdown={"fp32": 1.0})


def test_import_does_not_import_torch():
    code = (
        "import sys, lensa.live as L\n"
        "r = {'fp32': 1e12, 'fp16': 1e12, 'bf16': 1e12}; o = {'fp32': 1e-4, 'fp16': 1e-4, 'bf16': 1e-4}\n"
        "CLOCK = L.CostModel('cpu', r, {a: 1e-8 for a in r}, o, 0.05)\n"
        "L.RunConfig().validate('cpu', clock=CLOCK); L.RunConfig(width=10).clamped('cpu', clock=CLOCK); L.is_busy()\n"
        "L.RunConfig(record=True).validate('cpu', clock=CLOCK); L.defaults_for(CLOCK)\n"
        "assert 'torch' not in sys.modules, 'lensa.live pulled in torch'\n"
        "print('clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


# --- configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"width": 0},
        {"width": 10**6},
        {"depth": 9},
        {"steps": 2.5},
        {"lr": float("nan")},
        {"batch_size": True},
        {"clip_grad_norm": -1.0},
        {"device": "tpu"},
        {"record": "yes"},
    ],
)
def test_out_of_range_config_is_invalid(change):
    with pytest.raises(live.LiveError) as info:
        replace(TINY, **change).validate("cpu")
    assert info.value.kind == "invalid"
    assert next(iter(change)) in info.value.message


def test_the_estimate_adds_up_the_clocks_terms():
    cfg = live.RunConfig(width=100, depth=2, batch_size=50, features=10, steps=7, warmup_steps=3, eval_size=200)
    per_step = 1e-4 * 3 + 1e-8 * cfg.parameters() + 6.0 * cfg.matmul_macs_per_sample() * 50 / 1e11
    eval_s = 2.0 * cfg.matmul_macs_per_sample() * 200 / 1e11
    assert cfg.arm_seconds(CLOCK, "fp32") == pytest.approx(10 * per_step + eval_s + 0.05)
    data = (cfg.train_batches("cpu") * 50 + 200) * 11 * 3e-9
    assert cfg.data_seconds(CLOCK) == pytest.approx(data)
    total = data + sum(cfg.arm_seconds(CLOCK, a) for a in live.ARMS)
    assert cfg.estimate_seconds("cpu", clock=CLOCK) == pytest.approx(total)
    # Fewer arms, less time: the limit applies to the arms actually asked for; an emulated arm costs the most.
    assert cfg.estimate_seconds("cpu", ("bf16",), CLOCK) < cfg.estimate_seconds("cpu", ("fp16",), CLOCK)


def test_the_matmul_rate_follows_the_widths_measured_and_levels_off_past_them():
    # Made-up rates per width (an emulated product three times slower at 1024 than at 256): between two measured
    # widths the rate is interpolated in log-log, so 512 (the geometric middle of 256 and 1024) gets the
    # geometric mean; outside them the nearest width's rate holds (beyond the caches the rate levels off).
    table = {"fp16": ((64, 4e9), (256, 6e9), (1024, 2e9))}
    clock = replace(CLOCK, rate_by_width=table)
    assert clock.rate("fp16", 256) == pytest.approx(6e9)
    assert clock.rate("fp16", 512) == pytest.approx(math.sqrt(6e9 * 2e9))
    assert clock.rate("fp16", 128) == pytest.approx(math.sqrt(4e9 * 6e9))
    assert clock.rate("fp16", 8) == clock.rate("fp16", 64) == pytest.approx(4e9)
    assert clock.rate("fp16", 4096) == pytest.approx(2e9)
    assert clock.rate("fp32", 512) == CLOCK.flop_per_s["fp32"]  # no widths measured: the one rate
    # The estimate uses the rate at the run's width: a 1024-wide FP16 run costs its matmuls at 2e9.
    cfg = live.RunConfig(width=1024, depth=2, batch_size=64, features=10, steps=7, warmup_steps=3)
    matmul = 10 * 6.0 * cfg.matmul_macs_per_sample() * 64
    assert cfg.arm_seconds(clock, "fp16") - cfg.arm_seconds(CLOCK, "fp16") == pytest.approx(matmul / 2e9 - matmul / 5e9)


def test_time_limit_refuses_a_run_too_long_for_this_clock_with_the_numbers():
    big = live.RunConfig(width=4096, depth=8, batch_size=16384, steps=1000)
    with pytest.raises(live.LiveError) as info:
        big.validate("cpu", clock=CLOCK)
    need, limit = info.value.numbers
    assert info.value.kind == "too_long" and limit == live.MAX_RUN_SECONDS["cpu"]
    assert need == pytest.approx(big.estimate_seconds("cpu", clock=CLOCK)) and need > limit
    # Small batches are no way round it: the optimizer's per-parameter work is costed too.
    with pytest.raises(live.LiveError):
        live.RunConfig(width=4096, depth=8, batch_size=8, steps=200).validate("cpu", clock=CLOCK)
    # The same settings pass on a clock whose 16-bit arms are fast: the limit follows the machine.
    cfg = live.RunConfig(width=512, depth=3, batch_size=2048, steps=100)
    with pytest.raises(live.LiveError):
        cfg.validate("cpu", clock=CLOCK)
    assert cfg.validate("cpu", clock=FAST) is cfg


def test_clamped_moves_every_field_into_limits_and_fits_the_time_limit():
    wild = live.RunConfig(width=100000, depth=0, batch_size=3, features=10**5, steps=10**6, lr=50.0, device="cpu")
    fixed = wild.clamped("cpu", clock=FAST)
    assert fixed.validate("cpu", clock=FAST) is fixed
    assert (fixed.width, fixed.depth, fixed.batch_size, fixed.features, fixed.lr) == (4096, 1, 8, 2048, 1.0)
    assert 1 <= fixed.steps < 1000
    assert fixed.estimate_seconds("cpu", clock=FAST) <= live.MAX_RUN_SECONDS["cpu"]
    assert replace(fixed, steps=fixed.steps + 1).estimate_seconds("cpu", clock=FAST) > live.MAX_RUN_SECONDS["cpu"]
    assert live.RunConfig(device="cpu", steps=10).clamped("cpu", clock=FAST) == live.RunConfig(device="cpu", steps=10)
    with pytest.raises(live.LiveError) as info:
        live.RunConfig(width=4096, depth=8, batch_size=16384).clamped("cpu", clock=FAST)
    assert info.value.kind == "invalid"


def test_recording_is_costed_per_recorded_value_and_tensor():
    cfg = live.RunConfig(width=10, depth=2, batch_size=4, features=5, steps=60)
    recorded = replace(cfg, record=True)
    assert cfg.recorded_steps() == () and recorded.recorded_steps() == (1, 2, 3, 5, 8, 12, 18, 26, 40, 60)
    # weight, gradient and update of every parameter; output and output gradient of 2 x (Linear, ReLU) + Linear
    assert recorded.recorded_values() == 3 * cfg.parameters() + 2 * 4 * (2 * 2 * 10 + 1)
    assert recorded.recorded_tensors() == 3 * 6 + 2 * 5
    per_arm = 10 * (recorded.recorded_values() * CLOCK.record_value_s + 28 * CLOCK.record_tensor_s)
    extra = recorded.estimate_seconds("cpu", clock=CLOCK) - cfg.estimate_seconds("cpu", clock=CLOCK)
    assert extra == pytest.approx(3 * per_arm)


def test_the_defaults_shrink_where_the_clock_is_slow():
    # A fast machine keeps the page's defaults; the emulated FP16 of CLOCK makes them shrink until they fit.
    assert live.defaults_for(FAST) == live.RunConfig(device="cpu", record=True)
    slow = live.defaults_for(CLOCK)
    assert slow.estimate_seconds("cpu", clock=CLOCK) <= live.DEFAULT_RUN_SECONDS
    assert (slow.width, slow.batch_size, slow.steps) in live.DEFAULT_CANDIDATES
    bigger = live.DEFAULT_CANDIDATES[live.DEFAULT_CANDIDATES.index((slow.width, slow.batch_size, slow.steps)) - 1]
    over = replace(slow, width=bigger[0], batch_size=bigger[1], steps=bigger[2])
    assert over.estimate_seconds("cpu", clock=CLOCK) > live.DEFAULT_RUN_SECONDS
    assert CLOCK.emulated("fp16") and not CLOCK.emulated("bf16") and not FAST.emulated("fp16")
    assert CLOCK.missing_flags("fp16") == ("amx_fp16", "avx512_fp16") and CLOCK.missing_flags("bf16") == ("amx_bf16",)


@requires_torch
def test_calibration_times_each_arm_here_within_its_budget():
    import torch

    from lensa.live.worker import worker_threads

    # The lab calibrates in its worker, with the worker's threads: the same here (two threads on two cores that
    # other work shares wait on each other at every product, and a probe can take ten times as long).
    threads = torch.get_num_threads()
    torch.set_num_threads(worker_threads())
    try:
        clock = live.calibrate("cpu")
    finally:
        torch.set_num_threads(threads)
    for table in (clock.flop_per_s, clock.param_step_s, clock.layer_step_s):
        assert set(table) == set(live.ARMS) and all(math.isfinite(v) and v > 0 for v in table.values())
    assert clock.slowdown["fp32"] == 1.0
    assert clock.slowdown["fp16"] == pytest.approx(clock.flop_per_s["fp32"] / clock.flop_per_s["fp16"])
    # Every arm measured its rate at the narrowest width at least, in order, and the headline rate is one of them.
    for arm, rates in clock.rate_by_width.items():
        widths = [w for w, _r in rates]
        assert widths == list(live.clock.RATE_WIDTHS[: len(widths)]) and widths
        assert all(math.isfinite(r) and r > 0 for _w, r in rates)
        assert clock.flop_per_s[arm] in [r for _w, r in rates]
    # Each 16-bit arm's recorded step against fp32's: measured where the arm is fast, else the other's (or 1).
    assert set(clock.record_scale) == {"fp16", "bf16"}
    assert all(math.isfinite(v) and v > 0 for v in clock.record_scale.values())
    assert clock.capability == torch.backends.cpu.get_cpu_capability()
    # The budget is 2 s on a machine of its own; a shared CI core can stretch every probe, so allow 5x.
    assert clock.calibration_s < 5 * live.clock.CALIBRATION_BUDGET_S
    assert live.machine_clock("cpu") is live.machine_clock("cpu")  # kept for the process's life


def test_train_flop_follows_six_times_macs_times_samples():
    cfg = live.RunConfig(width=10, depth=3, batch_size=4, features=5, steps=7, warmup_steps=1)
    assert cfg.matmul_macs_per_sample() == 5 * 10 + 2 * 10 * 10 + 10
    assert cfg.train_flop() == 6 * 260 * 4 * 8
    assert cfg.parameters() == (5 * 10 + 10) + 2 * (10 * 10 + 10) + (10 + 1)


def test_unknown_or_repeated_arms_are_invalid():
    for arms in [("fp8",), (), ("fp32", "fp32")]:
        with pytest.raises(live.LiveError) as info:
            live.compare(TINY, arms=arms)
        assert info.value.kind == "invalid"


# --- the comparison -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run():
    if not _has_torch():
        pytest.skip("torch is not installed")
    seen: list[tuple[float, str]] = []
    result = live.compare(TINY, progress=lambda f, m: seen.append((f, m)))
    return result, seen


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


@requires_torch
def test_comparison_is_complete(tiny_run):
    c, _ = tiny_run
    assert c.wall_s < 30.0
    assert not c.cancelled and c.device == "cpu" and not c.not_run
    assert list(c.arms) == ["fp32", "fp16", "bf16"]
    n = TINY.steps
    for name, a in c.arms.items():
        assert a.arm == name and a.compute_dtype == {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[name]
        assert len(a.losses) == len(a.loss_scales) == len(a.skipped) == n
        assert all(math.isfinite(v) and v > 0 for v in a.losses)
        assert a.time_s > 0 and a.time_per_step_s == pytest.approx(a.time_s / n)
        assert a.final_loss == a.losses[-1]
        assert 0.8 < a.accuracy <= 1.0  # the model really learned the rule
        assert a.final_loss < 0.7 * a.losses[0]
        assert math.isfinite(a.eval_loss)
        assert a.peak_memory_bytes is None and "not measured on CPU" in a.memory_note
        assert a.saved_for_backward_bytes > 0
        assert a.skipped_steps == sum(a.skipped) and a.warmup_steps == TINY.warmup_steps
    fp16 = c.arms["fp16"]
    assert all(s is not None and s > 0 and math.log2(s).is_integer() for s in fp16.loss_scales)
    assert fp16.loss_scales[0] == 2.0**16  # GradScaler's default init_scale
    assert all(s is None for s in c.arms["fp32"].loss_scales + c.arms["bf16"].loss_scales)
    assert not any(c.arms["fp32"].skipped + c.arms["bf16"].skipped)


@requires_torch
def test_every_arm_starts_from_the_same_weights_and_data(tiny_run):
    c, _ = tiny_run
    first = [a.losses[0] for a in c.arms.values()]
    # Same weights and batch: the first losses differ only by the 16-bit rounding of the forward pass.
    assert max(first) - min(first) < 1e-2
    assert c.arms["fp32"].losses[0] == pytest.approx(math.log(2), abs=0.05)


@requires_torch
def test_bf16_and_fp16_final_loss_match_fp32(tiny_run):
    c, _ = tiny_run
    base = c.arms["fp32"].final_loss
    assert abs(c.arms["bf16"].final_loss - base) <= LOSS_TOLERANCE
    assert abs(c.arms["fp16"].final_loss - base) <= LOSS_TOLERANCE


@requires_torch
def test_autocast_runs_linear_layers_in_16_bits_and_the_loss_in_fp32(tiny_run):
    c, _ = tiny_run
    layers = TINY.depth + 1
    assert c.arms["fp32"].layer_output_dtypes == ("float32",) * layers
    assert c.arms["fp16"].layer_output_dtypes == ("float16",) * layers
    assert c.arms["bf16"].layer_output_dtypes == ("bfloat16",) * layers
    assert {a.loss_dtype for a in c.arms.values()} == {"float32"}
    # 16-bit activations: autograd keeps fewer bytes for the backward pass.
    assert c.arms["bf16"].saved_for_backward_bytes < c.arms["fp32"].saved_for_backward_bytes


@requires_torch
def test_progress_rises_to_one(tiny_run):
    _, seen = tiny_run
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0 and seen[-1][1] == "done"
    assert {m.split(":")[0] for _, m in seen[:-1]} == {"fp32", "fp16", "bf16"}


@requires_torch
def test_rows_and_csv_follow_the_article_table(tiny_run):
    c, _ = tiny_run
    rows = live.comparison_rows(c)
    assert [r["arm"] for r in rows] == ["fp32", "fp16", "bf16"]
    assert rows[0]["speedup_vs_fp32"] == 1.0
    bf16 = rows[2]
    assert bf16["speedup_vs_fp32"] == pytest.approx(c.arms["fp32"].time_s / c.arms["bf16"].time_s)
    assert bf16["time_per_step_ms"] == pytest.approx(1e3 * c.arms["bf16"].time_s / TINY.steps)
    assert bf16["peak_memory_mb"] is None
    text = live.rows_to_csv(rows).splitlines()
    assert text[0].split(",")[:3] == ["arm", "label", "time_s"] and len(text) == 4
    assert text[1].split(",")[6] == ""  # peak memory not measured on CPU: empty cell
    assert live.speedup(c, "fp8") is None and live.rows_to_csv([]) == ""


# The lab's download, column by column: what a reader opening the file expects to find.
CSV_COLUMNS = [
    "arm",
    "label",
    "time_s",
    "time_per_step_ms",
    "final_loss",
    "accuracy",
    "peak_memory_mb",
    "saved_for_backward_mb",
    "skipped_steps",
    "speedup_vs_fp32",
]


@requires_torch
def test_the_lab_csv_holds_the_comparisons_results(tiny_run):
    c, _ = tiny_run
    text = live.rows_to_csv(live.comparison_rows(c))  # what pages/lab.py offers for download
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == CSV_COLUMNS
    rows = list(reader)
    assert [r["arm"] for r in rows] == list(c.arms) == ["fp32", "fp16", "bf16"]  # one row per arm, in order
    for row in rows:
        a = c.arms[row["arm"]]
        assert row["label"] == a.label
        # every number parses and is the run's own, to the last digit (the CSV writes floats in full)
        assert float(row["time_s"]) == a.time_s
        assert float(row["time_per_step_ms"]) == pytest.approx(1e3 * a.time_s / TINY.steps)
        assert float(row["final_loss"]) == a.final_loss == a.losses[-1]
        assert float(row["accuracy"]) == a.accuracy
        assert row["peak_memory_mb"] == ""  # not measured on the CPU: an empty cell, not 0
        assert float(row["saved_for_backward_mb"]) == pytest.approx(a.saved_for_backward_bytes / 1e6)
        assert int(row["skipped_steps"]) == a.skipped_steps == sum(a.skipped)
        assert float(row["speedup_vs_fp32"]) == pytest.approx(c.arms["fp32"].time_s / a.time_s)
    assert float(rows[0]["speedup_vs_fp32"]) == 1.0


@requires_torch
def test_recording_leaves_the_training_alone_and_its_steps_off_the_clock(tiny_run):
    plain, _ = tiny_run
    c = live.compare(replace(TINY, record=True))
    recorded = replace(TINY, record=True).recorded_steps()
    assert 0 < len(recorded) < TINY.steps
    assert any("off the clock" in note for note in c.notes)
    for name, arm in c.arms.items():
        assert arm.losses == plain.arms[name].losses  # the hooks only read
        assert arm.loss_scales == plain.arms[name].loss_scales
        assert arm.timed_steps == TINY.steps - len(recorded) and arm.recorded_steps == recorded
        assert arm.time_per_step_s == pytest.approx(arm.time_s / TINY.steps)
        assert arm.recording is not None and arm.recording.meta["arm"] == name
    assert all(
        a.recording is None and a.timed_steps == TINY.steps and not a.recorded_steps for a in plain.arms.values()
    )
    assert plain.recordings() == {}
    # Every step recorded: nothing else to time, so the clock counts them, recording included.
    short = live.compare(replace(TINY, steps=3, record=True), arms=("fp32",))
    assert short.arms["fp32"].timed_steps == 3 and short.arms["fp32"].recorded_steps == (1, 2, 3)
    assert any("include the recording" in note for note in short.notes)


@requires_torch
def test_cancelling_keeps_the_finished_arms():
    state = {"stop": False}

    def progress(_fraction, message):
        if message.startswith("fp16"):
            state["stop"] = True

    c = live.compare(TINY, progress=progress, should_stop=lambda: state["stop"])
    assert c.cancelled
    assert list(c.arms) == ["fp32"] and len(c.arms["fp32"].losses) == TINY.steps
    assert any("fp16" in note for note in c.notes)
    assert not live.is_busy()

    early = live.compare(TINY, should_stop=lambda: True)
    assert early.cancelled and early.arms == {}


@requires_torch
def test_a_second_concurrent_run_is_refused_as_busy():
    started, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def hold(_fraction, _message):
        started.set()
        release.wait(timeout=30)

    def first():
        outcome["result"] = live.compare(replace(TINY, steps=2), arms=("fp32",), progress=hold)

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert started.wait(timeout=30)
        assert live.is_busy()
        for attempt in (
            lambda: live.compare(TINY),
            lambda: live.matmul_benchmark(size=64, device="cpu"),
            lambda: live.gradscaler_trace(steps=2, spike_steps=(), device="cpu"),
        ):
            with pytest.raises(live.LiveError) as info:
                attempt()
            assert info.value.kind == "busy"
        with pytest.raises(live.LiveError) as waited, live.run_slot(wait_s=0.05):
            pass
        assert waited.value.kind == "busy" and "waiting" in waited.value.message
    finally:
        release.set()
        worker.join(timeout=60)
    assert not live.is_busy()
    assert not outcome["result"].cancelled


@requires_torch
def test_the_slot_holder_may_nest_runs():
    with live.run_slot():
        assert live.is_busy()
        c = live.compare(replace(TINY, steps=2), arms=("bf16",))
        assert c.arms["bf16"].losses
        assert live.is_busy()
    assert not live.is_busy()


@requires_torch
def test_out_of_memory_becomes_kind_oom_and_frees_the_slot(monkeypatch):
    import torch

    def explode(*_args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")

    monkeypatch.setattr("lensa.live.arms._build_mlp", explode)  # where the comparison reads it
    with pytest.raises(live.LiveError) as info:
        live.compare(TINY)
    assert info.value.kind == "oom" and "freed" in info.value.message
    assert not live.is_busy()


@requires_torch
@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_kind_no_cuda():
    for attempt in (
        lambda: live.compare(replace(TINY, device="cuda")),
        lambda: live.device_info("cuda"),
        lambda: live.matmul_benchmark(device="cuda"),
        lambda: live.gradscaler_trace(device="cuda"),
    ):
        with pytest.raises(live.LiveError) as info:
            attempt()
        assert info.value.kind == "no_cuda"
    assert not live.is_busy()


# --- GradScaler trace -----------------------------------------------------------------


@requires_torch
def test_real_gradscaler_trace_matches_the_simulated_scaler():
    kwargs = {"init_scale": 2.0**30, "growth_interval": 2}
    trace = live.gradscaler_trace(steps=20, spike_steps=(14,), spike_factor=1e6, device="cpu", **kwargs)
    found = [s.found_inf for s in trace]
    predicted = simulate(found, **kwargs)
    assert [s.scale for s in trace] == [p.scale for p in predicted]
    assert [s.scale_after for s in trace] == [p.scale_after for p in predicted]
    assert [s.skipped for s in trace] == [p.skipped for p in predicted]
    # 2**30 times any gradient is far past FP16's 65504: the first step really overflows and is skipped.
    assert trace[0].found_inf and trace[0].skipped and not math.isfinite(trace[0].max_abs_grad)
    assert trace[13].spiked and trace[13].found_inf and trace[13].skipped
    clean = [s for s in trace if not s.found_inf]
    assert clean and all(math.isfinite(s.max_abs_grad) and not s.skipped for s in clean)
    assert any(s.scale_after > s.scale for s in trace)  # the scale grew after growth_interval clean steps


@requires_torch
def test_trace_without_provocation_never_skips():
    trace = live.gradscaler_trace(steps=6, init_scale=1.0, spike_steps=(), growth_interval=100, device="cpu")
    assert not any(s.found_inf or s.skipped for s in trace)
    assert {s.scale for s in trace} == {1.0}
    assert [s.step for s in trace] == list(range(1, 7))


def test_trace_settings_are_checked():
    for kwargs in ({"steps": 0}, {"growth_interval": 0}, {"spike_steps": (99,)}, {"init_scale": float("inf")}):
        with pytest.raises(live.LiveError) as info:
            live.gradscaler_trace(device="cpu", **{"steps": 10, **kwargs})
        assert info.value.kind == "invalid"


# --- matmul benchmark -----------------------------------------------------------------


@requires_torch
def test_matmul_benchmark_on_cpu():
    rows = {r["mode"]: r for r in live.matmul_benchmark(size=256, repeats=3, device="cpu")}
    assert list(rows) == ["fp32", "tf32", "bf16", "fp16"]
    for mode in ("fp32", "bf16", "fp16"):
        row = rows[mode]
        assert row["applicable"] and row["tflops"] > 0 and row["median_s"] > 0 and row["runs"] >= 3
        assert row["tflops"] == pytest.approx(2 * 256**3 / row["median_s"] / 1e12)
    tf32 = rows["tf32"]
    assert not tf32["applicable"] and tf32["tflops"] is None and "GPU" in tf32["reason"]
    assert not live.is_busy()


@requires_torch
def test_matmul_benchmark_checks_its_settings_and_can_be_stopped():
    for kwargs in ({"size": 10}, {"size": 10**5}, {"repeats": 0}, {"modes": ("fp64",)}):
        with pytest.raises(live.LiveError) as info:
            live.matmul_benchmark(device="cpu", **kwargs)
        assert info.value.kind == "invalid"
    with pytest.raises(live.LiveError) as info:
        live.matmul_benchmark(size=64, device="cpu", should_stop=lambda: True)
    assert info.value.kind == "cancelled"
    assert not live.is_busy()


# --- device info ------------------------------------------------------------------------


@requires_torch
def test_device_info_reads_cpu_flags(tmp_path):
    fake = tmp_path / "cpuinfo"
    block = "processor\t: {p}\nmodel name\t: Test CPU 9000\nphysical id\t: 0\ncore id\t\t: {c}\nflags\t\t: {f}\n\n"
    flags = "fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16"
    fake.write_text("".join(block.format(p=i, c=i // 2, f=flags) for i in range(4)))
    info = live.device_info("cpu", cpuinfo_path=str(fake))
    assert info.name == "Test CPU 9000" and info.cores == 2
    assert info.bf16_matrix_units is True and info.bf16_fast is True
    assert "amx_bf16" in info.cpu_flags and "sse" not in info.cpu_flags
    assert info.torch_version and "BF16 matrix units" in info.summary()

    fake.write_text(block.format(p=0, c=0, f="fpu sse avx2"))
    plain = live.device_info("cpu", cpuinfo_path=str(fake))
    assert plain.bf16_matrix_units is False and plain.bf16_fast is False and plain.notes


@requires_torch
@pytest.mark.parametrize(
    ("flags", "key"),
    [
        ("fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16", "cpu_fast"),  # a Xeon with AMX
        ("fpu avx2 avx512f avx512_bf16", "cpu_bf16_vector"),  # an EPYC with AVX-512 BF16: native, not emulated
        ("fpu avx2", "cpu_slow"),  # an EPYC with AVX2 only
    ],
)
def test_the_labs_bf16_caption_follows_the_cpus_flags(tmp_path, flags, key):
    from lensa.ui import i18n, live_view

    fake = tmp_path / "cpuinfo"
    fake.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n")
    info = live.device_info("cpu", cpuinfo_path=str(fake))
    assert live_view.cpu_bf16_key(info) == key
    emulated = "emulated" in i18n.text("en", f"lab.{key}").replace("not emulated", "")
    assert emulated == ("avx512_bf16" not in flags)
    assert live_view.cpu_bf16_key(live.device_info("cpu", cpuinfo_path=str(tmp_path / "absent"))) is None


@requires_torch
def test_device_info_survives_a_missing_cpuinfo(tmp_path):
    info = live.device_info("cpu", cpuinfo_path=str(tmp_path / "absent"))
    assert info.device == "cpu" and info.name
    assert info.bf16_matrix_units is None and info.cores is None
    assert any("could not be read" in n for n in info.notes)


# --- GPU only ---------------------------------------------------------------------------


@requires_torch
@pytest.mark.gpu
@needs_cuda
def test_cuda_comparison_measures_peak_memory():
    c = live.compare(replace(TINY, device="cuda", width=256, batch_size=1024))
    assert c.device == "cuda"
    for a in c.arms.values():
        assert a.peak_memory_bytes is not None and a.peak_memory_bytes > 0
    assert c.arms["fp16"].layer_output_dtypes[0] == "float16"
    if "bf16" in c.arms:
        assert c.arms["bf16"].layer_output_dtypes[0] == "bfloat16"
        assert abs(c.arms["bf16"].final_loss - c.arms["fp32"].final_loss) <= LOSS_TOLERANCE
    else:
        assert "bf16" in c.not_run


@requires_torch
@pytest.mark.gpu
@needs_cuda
def test_cuda_matmul_benchmark_has_tf32():
    import torch

    rows = {r["mode"]: r for r in live.matmul_benchmark(size=1024, repeats=3, device="cuda")}
    assert rows["fp32"]["tflops"] > 0 and rows["fp16"]["tflops"] > 0
    if torch.cuda.get_device_capability()[0] >= 8:
        assert rows["tf32"]["applicable"] and rows["tf32"]["tflops"] > 0
    else:
        assert not rows["tf32"]["applicable"]
    assert torch.get_float32_matmul_precision() == "highest"  # restored after the TF32 mode


@requires_torch
@pytest.mark.gpu
@needs_cuda
def test_cuda_gradscaler_trace_matches_simulation():
    kwargs = {"init_scale": 2.0**30, "growth_interval": 2}
    trace = live.gradscaler_trace(steps=12, device="cuda", spike_steps=(), **kwargs)
    predicted = simulate([s.found_inf for s in trace], **kwargs)
    assert [s.scale_after for s in trace] == [p.scale_after for p in predicted]
    assert trace[0].skipped


@requires_torch
def test_a_mode_too_slow_for_the_budget_is_measured_smaller(monkeypatch):
    """An emulated format (FP16 on a CPU without FP16 matrix units) must not keep a learner waiting for minutes."""
    monkeypatch.setattr("lensa.live.matmul.MATMUL_PRODUCT_BUDGET_S", 1e-9)  # every mode now counts as too slow
    rows = live.matmul_benchmark(size=1024, modes=("fp32", "bf16"), repeats=1, warmup=0, device="cpu")
    assert [r["size"] for r in rows] == [256, 256]
    assert all(r["tflops"] and r["tflops"] > 0 for r in rows)
    monkeypatch.setattr("lensa.live.matmul.MATMUL_PRODUCT_BUDGET_S", 1e9)  # nothing is too slow: the asked size is kept
    assert live.matmul_benchmark(size=512, modes=("fp32",), repeats=1, warmup=0, device="cpu")[0]["size"] == 512


# --- the recipes below 16 bits ---------------------------------------------------------------------------------


LOWP_CLOCK = replace(
    CLOCK,
    lowp_pass_s={"nvfp4 nearest along": 1e-4},
    lowp_value_s={"nvfp4 nearest along": 2e-9},
    lowp_layer_s=3e-5,
    count_pass_s=1e-4,
    count_value_s=1e-9,
)


def test_an_arm_below_16_bits_costs_fp32s_step_and_each_quantization():
    from lensa.numerics.training_recipes import TRAINING_RECIPES, model_passes

    cfg = live.RunConfig(width=64, depth=2, batch_size=32, features=16, steps=20, warmup_steps=2, eval_size=200)
    passes = model_passes(TRAINING_RECIPES["nvfp4_recipe"], cfg.linear_shapes())
    # an unmeasured kind of pass costs the medians of the measured ones (here the one measured)
    quantize = 3e-5 * 3 + sum(1e-4 + p.values * 2e-9 for p, _cls in passes)
    counted = sum(1e-4 + p.values * 1e-9 for p, _cls in passes)
    assert cfg.quantize_seconds(LOWP_CLOCK, "nvfp4_recipe") == pytest.approx((quantize, counted))
    fp32 = cfg.arm_seconds(LOWP_CLOCK, "fp32")
    expected = fp32 + (cfg.steps + cfg.warmup_steps) * quantize + len(cfg.counted_steps()) * counted
    assert cfg.arm_seconds(LOWP_CLOCK, "nvfp4_recipe") == pytest.approx(expected)
    assert cfg.quantize_seconds(LOWP_CLOCK, "bf16") == (0.0, 0.0)
    # the first layer's input needs no gradient: its weight is read once, by fprop
    first = [p for p in model_passes(TRAINING_RECIPES["nvfp4"], cfg.linear_shapes()[:1])]
    assert [(p.role, p.products) for p, _c in first if p.role == "weight"] == [("weight", ("fprop",))]


def test_the_recipes_defaults_are_the_largest_within_their_target():
    cfg = live.recipes_defaults_for(LOWP_CLOCK)
    assert not cfg.record
    assert cfg.estimate_seconds("cpu", live.ALL_ARMS, LOWP_CLOCK) <= live.RECIPES_RUN_SECONDS
    bigger = [c for c in live.config.RECIPES_CANDIDATES if c[0] * c[1] * c[2] > cfg.width * cfg.batch_size * cfg.steps]
    for width, batch, steps in bigger:
        over = replace(cfg, width=width, batch_size=batch, steps=steps)
        assert over.estimate_seconds("cpu", live.ALL_ARMS, LOWP_CLOCK) > live.RECIPES_RUN_SECONDS


def test_final_loss_gap_and_divergence_from_the_losses():
    from lensa.numerics import training_recipes

    assert training_recipes.final_loss([5.0] * 9 + [1.0, 3.0]) == 3.0  # the last tenth of 11 steps: one step
    assert training_recipes.final_loss([4.0] * 10 + [2.0] * 10) == 2.0
    assert (
        training_recipes.diverged([1.0, 0.5, float("nan")])
        and training_recipes.diverged([1.0, 2.0, 3.0])
        and not training_recipes.diverged([1.0, 0.5])
    )


@requires_torch
def test_a_comparison_trains_the_recipes_below_16_bits():
    arms = ("fp32", "bf16", "fp8_delayed", "nvfp4_recipe")
    c = live.compare(TINY, arms=arms)
    assert list(c.arms) == list(arms) and not c.cancelled
    counted = TINY.counted_steps()
    for arm in arms[2:]:
        a = c.arms[arm]
        assert a.counted_steps == counted and a.timed_steps == TINY.steps - len(counted)
        assert a.compute_dtype == "float32" and a.layer_output_dtypes == ("float32",) * (TINY.depth + 1)
        layers = {(s.layer, s.role) for s in a.shares}
        assert ("0", "input") in layers and ("0", "grad") in layers
        assert all(0 <= s.flushed <= 1 and 0 <= s.saturated <= 1 and s.values > 0 for s in a.shares)
        assert all(math.isfinite(v) for v in a.losses) and math.isfinite(a.eval_loss)
    assert not c.arms["fp32"].shares and c.arms["fp32"].counted_steps == ()
    # NVIDIA's recipe keeps the last layer in BF16: its tensors are counted too
    last = str(2 * TINY.depth)
    assert {(s.layer, s.role) for s in c.arms["nvfp4_recipe"].shares} >= {(last, "input"), (last, "weight")}
    rows = {r["arm"]: r for r in live.recipe_rows(c)}
    assert rows["bf16"]["gap_vs_bf16_pct"] == 0.0 and rows["fp32"]["flushed_max"] is None
    gap = (live.final_loss(c.arms["nvfp4_recipe"]) / live.final_loss(c.arms["bf16"]) - 1) * 100
    assert rows["nvfp4_recipe"]["gap_vs_bf16_pct"] == pytest.approx(gap)
    assert rows["nvfp4_recipe"]["diverged"] == live.diverged(c.arms["nvfp4_recipe"])
    text = live.rows_to_csv(live.recipe_rows(c))
    assert text.splitlines()[0].startswith("arm,label,final_loss,gap_vs_bf16_pct")


@requires_torch
def test_calibration_times_the_quantizations():
    clock = live.machine_clock("cpu")
    assert clock.lowp_pass_s and set(clock.lowp_pass_s) == set(clock.lowp_value_s)
    assert all(math.isfinite(v) and v >= 0 for v in (*clock.lowp_pass_s.values(), *clock.lowp_value_s.values()))
    assert clock.lowp_layer_s >= 0 and clock.count_pass_s >= 0 and clock.count_value_s >= 0


def test_the_recipes_verdict_counts_against_bf16_from_the_losses():
    """What the lab's cards say of a comparison: which recipes ended close to BF16, diverged, and the worst gap."""
    from types import SimpleNamespace

    def arm(final: float, rising: bool = False) -> SimpleNamespace:
        losses = [1.0, 2.0, 3.0] * 4 if rising else [4.0] * 9 + [final] * 3
        return SimpleNamespace(losses=losses)

    comparison = SimpleNamespace(
        arms={
            "fp32": arm(2.0),
            "bf16": arm(2.0),
            "fp8_current": arm(2.01),  # 0.5% above BF16: close
            "mxfp4": arm(2.5),  # 25% above: the worst finite gap
            "nvfp4_recipe": arm(float("nan")),  # a NaN loss: diverged, no gap
        }
    )
    verdict = live.recipes_verdict(comparison)
    assert verdict.arms == ("fp8_current", "mxfp4", "nvfp4_recipe")  # only recipes below 16 bits, in run order
    assert verdict.close == ("fp8_current",)
    assert verdict.diverged == ("nvfp4_recipe",)
    gap = (live.final_loss(comparison.arms["mxfp4"]) / live.final_loss(comparison.arms["bf16"]) - 1) * 100
    assert verdict.worst == "mxfp4" and verdict.worst_gap_pct == pytest.approx(gap)
    assert live.CLOSE_TO_BF16 * 100 == live.CLOSE_TO_BF16_PCT
    nothing = live.recipes_verdict(SimpleNamespace(arms={"bf16": arm(2.0)}))
    assert nothing.arms == () and nothing.worst is None and math.isnan(nothing.worst_gap_pct)
