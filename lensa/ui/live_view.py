"""The words and tables around live runs: device lines, result tables, plain error messages.

Nothing here imports torch: the runs happen in the worker process
(:mod:`lensa.live.worker`), and only their plain results reach these functions.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lensa.models.scaling import ScalerStep, simulate
from lensa.ui import i18n
from lensa.ui.frame import Page

if TYPE_CHECKING:
    from lensa.live.device import DeviceInfo

_LOG = logging.getLogger(__name__)
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def torch_pip_command() -> str:
    """The pip command that adds the CPU build of the torch that requirements.txt pins (its only pin)."""
    try:
        lines = REQUIREMENTS.read_text().splitlines()
    except OSError:
        lines = []
    pins = [re.sub(r"\s+", "", line.split("#", 1)[0]) for line in lines if re.match(r"^\s*torch\s*[=<>~!]", line)]
    return f'pip install "{pins[0] if pins else "torch"}" --index-url {CPU_INDEX}'


def torch_missing_text(page: Page) -> str:
    """What a learner reads where a live run would be: PyTorch is missing, and the exact command that adds it."""
    return page.t("live.torch_missing", pip=torch_pip_command())


def error_text(page: Page, exc: BaseException) -> str:
    """A learner-facing sentence for anything a live run raised."""
    from lensa import live

    if isinstance(exc, live.LiveError):
        if exc.kind == "too_long" and len(exc.numbers) == 2:
            need, limit = exc.numbers
            return page.t("live.error_too_long", seconds=page.seconds(need), limit=page.seconds(limit))
        if exc.kind == "not_ready" and len(exc.numbers) == 1:
            return page.t("live.error_not_ready", seconds=page.seconds(exc.numbers[0]))
        if exc.kind == "invalid":
            # The core's detail is English and names code fields; it goes to the log, not the page.
            _LOG.warning("live run refused: %s", exc.message)
        return page.t(f"live.error_{exc.kind}")
    # An exception inside the worker process arrives as a RemoteError that keeps its original class name.
    return page.t("live.error_unexpected", detail=getattr(exc, "type_name", type(exc).__name__))


def device_line(page: Page, info: Any) -> str:
    """One line about the hardware: a GPU's name and memory, or a CPU's cores and BF16 units."""
    flag = {True: page.t("live.yes"), False: page.t("live.no"), None: page.t("live.unknown")}
    if info.device == "cuda":
        return page.t(
            "live.device_gpu",
            name=info.name,
            memory=page.gb(info.memory_bytes or 0),
            cc=info.compute_capability,
            bf16=flag[info.bf16_matrix_units],
        )
    return page.t(
        "live.device_cpu",
        name=info.name,
        cores=page.num(info.cores or 0),
        threads=page.num(info.threads or 0),
        bf16=flag[info.bf16_matrix_units],
    )


FORMAT_OF_ARM = {"fp16": "FP16", "bf16": "BF16"}


def why_emulated(page: Page, clock: Any, arm: str) -> str:
    """Why ``arm``'s 16-bit products have no fast path on this CPU: the flags it lacks, or the kernels torch runs.

    ``clock`` is the worker's :class:`lensa.live.CostModel` (its ``cpu_flags`` and ``capability``).
    """
    from lensa.live.clock import NATIVE_FLAGS

    missing = clock.missing_flags(arm)
    if len(missing) == len(NATIVE_FLAGS[arm]):
        return page.t("lab.why_missing", fmt=FORMAT_OF_ARM[arm], flags=", ".join(missing))
    have = [f for f in NATIVE_FLAGS[arm] if f not in missing]
    return page.t("lab.why_kernels", flags=", ".join(have), capability=clock.capability)


def emulation_notes(page: Page, comparison: Any, clock: Any) -> list[str]:
    """One paragraph per AMP arm that this CPU emulates and that ran slower than FP32: by how much, and why.

    Both must hold: the calibration found the arm's matrix products slower than FP32's
    (:meth:`lensa.live.CostModel.emulated`), and this run's arm took longer than FP32's, past the noise of
    :data:`lensa.live.clock.SLOWER`. The run's ratio is the one said; the calibration's is quoted beside it.
    """
    from lensa import live
    from lensa.live.clock import SLOWER

    if comparison.device != "cpu" or clock is None:
        return []
    notes = []
    for arm in ("fp16", "bf16"):
        speed = live.speedup(comparison, arm)
        # Emulated (the calibration's products are slower than FP32's) and slower in this very run: a tiny
        # model can be slower in BF16 from autocast's casts alone, which is not emulation.
        if speed is None or 1.0 / speed <= SLOWER or not clock.emulated(arm):
            continue
        notes.append(
            page.t(
                "lab.emulated",
                arm=page.t(f"lab.arm_{arm}"),
                ratio=page.ratio(speed),
                cal=page.ratio(1.0 / clock.slowdown.get(arm, 1.0)),
                why=why_emulated(page, clock, arm),
            )
        )
    return notes


def comparison_table(page: Page, comparison: Any) -> list[dict[str, str]]:
    """The article's table, one row per finished arm, every number written for the page's language."""
    from lensa import live

    header = {k: page.t(f"lab.col_{k}") for k in ("arm", "time", "loss", "acc", "mem", "saved", "skipped", "speedup")}
    rows = []
    for row in live.comparison_rows(comparison):
        memory = row["peak_memory_mb"]
        speed = row["speedup_vs_fp32"]
        rows.append(
            {
                header["arm"]: page.t(f"lab.arm_{row['arm']}"),
                header["time"]: page.significant(row["time_s"], 3),
                header["loss"]: page.num(row["final_loss"], 4),
                header["acc"]: page.pct(row["accuracy"]),
                header["mem"]: page.t("lab.not_measured_cpu") if memory is None else page.num(memory, 1),
                header["saved"]: page.num(row["saved_for_backward_mb"], 1),
                header["skipped"]: page.num(row["skipped_steps"]),
                header["speedup"]: "—" if speed is None else page.ratio(speed),
            }
        )
    return rows


def memory_table(page: Page, comparison: Any) -> list[dict[str, str]]:
    """Lensa's prediction of each arm's memory next to what the run measured (MB = 10**6 bytes).

    Kept-for-backward is measured on every device; peak memory only on CUDA
    (``max_memory_allocated``), where the prediction counts the data the lab
    keeps on the device.
    """
    from lensa.models.lab_memory import lab_mlp_memory

    cfg = comparison.config
    resident = cfg.train_batches(comparison.device) * cfg.batch_size + cfg.eval_size
    head = {k: page.t(f"lab.mem_{k}") for k in ("arm", "saved_pred", "saved_meas", "peak_pred", "peak_meas")}
    rows = []
    for name, arm in comparison.arms.items():
        predicted = lab_mlp_memory(cfg.width, cfg.depth, cfg.features, cfg.batch_size, name, resident)
        measured_peak = arm.peak_memory_bytes
        rows.append(
            {
                head["arm"]: page.t(f"lab.arm_{name}"),
                head["saved_pred"]: page.significant(predicted.saved_for_backward / 1e6, 4),
                head["saved_meas"]: page.significant(arm.saved_for_backward_bytes / 1e6, 4),
                head["peak_pred"]: page.num(predicted.peak / 1e6, 1),
                head["peak_meas"]: page.t("lab.not_measured_cpu")
                if measured_peak is None
                else page.num(measured_peak / 1e6, 1),
            }
        )
    return rows


def benchmark_table(page: Page, rows: Sequence[Any], gpu: Any) -> list[dict[str, str]]:
    """Measured matmul TFLOP/s next to a datasheet's dense peak, one row per mode."""
    header = {k: page.t(f"speed.measure_col_{k}", gpu=gpu.name) for k in ("mode", "measured", "size", "datasheet")}
    out = []
    for row in rows:
        # Numbers stay numbers: the size each product was measured at has its own column (an emulated format is
        # measured smaller, so its one product stays short).
        size = "—"
        if row["tflops"]:
            measured = page.significant(row["tflops"], 3)
            size = page.num(row["size"])
        elif row["mode"] == "tf32" and row["device"] == "cpu":
            measured = page.t("speed.measure_no_tf32")
        else:
            measured = page.t("speed.measure_not_run")
        peak = gpu.peak(row["mode"])
        out.append(
            {
                header["mode"]: row["mode"].upper(),
                header["measured"]: measured,
                header["size"]: size,
                header["datasheet"]: "—" if peak is None else i18n.teraflops(peak, page.lang, 3),
            }
        )
    return out


def matmul_ratio_text(page: Page, rows: Sequence[Any], mode: str, gpu: Any) -> str | None:
    """Step 6's sentence on ``mode``'s measured speed over FP32's (TFLOP/s over TFLOP/s) beside ``gpu``'s datasheet
    ratio, naming the size each was measured at (an emulated mode is measured smaller); None unless both ran and the
    datasheet has ``mode``."""
    from lensa.models.speed import measured_speedup, peak_speedup

    measured, datasheet = measured_speedup(rows, mode), peak_speedup(gpu, mode)
    if measured is None or datasheet is None:
        return None
    size = {r["mode"]: r["size"] for r in rows}
    values = {
        "mode": mode.upper(),
        "gpu": gpu.name,
        "ratio": page.ratio(measured),
        "datasheet": page.ratio(datasheet),
        "n": page.num(size[mode]),
        "n32": page.num(size["fp32"]),
    }
    return page.t("speed.measure_ratio" if size[mode] == size["fp32"] else "speed.measure_ratio_sizes", **values)


def matmul_emulation_notes(page: Page, rows: Sequence[Any], clock: Any) -> list[str]:
    """Step 6's words for each 16-bit mode a CPU ran slower than FP32: the measured ratio of one product's time
    (FP32's TFLOP/s over the mode's) and why (:func:`why_emulated`)."""
    from lensa.live.clock import SLOWER

    by_mode = {r["mode"]: r for r in rows if r["tflops"]}
    fp32 = by_mode.get("fp32")
    if fp32 is None or fp32["device"] != "cpu" or clock is None:
        return []
    notes = []
    for mode in ("bf16", "fp16"):
        row = by_mode.get(mode)
        if row is None or fp32["tflops"] / row["tflops"] <= SLOWER:
            continue
        notes.append(
            page.t(
                "speed.measure_emulated",
                mode=mode.upper(),
                ratio=page.ratio(fp32["tflops"] / row["tflops"]),
                why=why_emulated(page, clock, mode),
                n=page.num(row["size"]),
            )
        )
    return notes


def trace_against_prediction(
    trace: Sequence[Any], init_scale: float, growth_interval: int
) -> tuple[list[ScalerStep], int | None]:
    """Lensa's simulator fed the real run's overflow pattern; returns (prediction, first differing step or None)."""
    predicted = simulate([s.found_inf for s in trace], init_scale=init_scale, growth_interval=growth_interval)
    for real, guess in zip(trace, predicted, strict=True):
        if real.scale_after != guess.scale_after or real.skipped != guess.skipped:
            return predicted, real.step
    return predicted, None


def log2(values: Sequence[float]) -> list[float]:
    with np.errstate(divide="ignore"):
        return [float(v) for v in np.log2(np.asarray(values, dtype=np.float64))]


def cpu_bf16_key(info: DeviceInfo) -> str | None:
    """The lab's caption on a CPU's BF16: AMX matrix units (``cpu_fast``), BF16 vector instructions only
    (``cpu_bf16_vector``), neither (``cpu_slow``); None where /proc/cpuinfo could not be read (the device
    line's notes say so)."""
    if info.bf16_fast is None:
        return None
    if info.bf16_matrix_units:
        return "cpu_fast"
    return "cpu_bf16_vector" if info.bf16_fast else "cpu_slow"


# --- the recipes below 16 bits -------------------------------------------------------------------------------------

RECIPE_GROUPS: dict[str, tuple[str, ...]] = {}
"""The lab's choice of recipes to compare, each beside FP32 and BF16 (filled below from
lensa.numerics.training_recipes)."""


def _groups() -> dict[str, tuple[str, ...]]:
    from lensa.numerics.training_recipes import TRAINING_RECIPES

    def bits(key: str) -> int:
        r = TRAINING_RECIPES[key].operand("input")
        return 16 if r is None else r.element_format.bits

    eight = tuple(k for k in TRAINING_RECIPES if bits(k) == 8)
    four = tuple(k for k in TRAINING_RECIPES if bits(k) < 8)
    return {
        "all": ("fp32", "fp16", "bf16", *TRAINING_RECIPES),
        "fp8": ("fp32", "bf16", *eight),
        "fp4": ("fp32", "bf16", *four),
    }


RECIPE_GROUPS.update(_groups())


def arm_colour_key(arm: str) -> str:
    """The format whose colour draws ``arm`` (:func:`lensa.numerics.training_recipes.element_of`)."""
    from lensa.numerics.training_recipes import element_of

    return element_of(arm)


def _gap(page: Page, gap: float | None) -> str:
    if gap is None:
        return "—"
    if gap != gap:  # NaN: the arm's loss was not finite
        return page.t("lab.not_finite")
    return f"{'+' if gap >= 0 else '−'}{page.num(abs(gap), 1)} %"


def recipe_table(page: Page, comparison: Any) -> list[dict[str, str]]:
    """One row per finished arm of a comparison of recipes (:func:`lensa.live.recipe_rows`), in the page's language."""
    from lensa import live

    head = {
        k: page.t(f"lab.rcol_{k}")
        for k in ("arm", "loss", "gap_bf16", "gap_fp32", "diverged", "flushed", "saturated", "step")
    }
    rows = []
    for row in live.recipe_rows(comparison):

        def share(value: float | None, layer: str | None) -> str:
            if value is None or layer is None:
                return "—"
            if value == 0:
                return page.pct(0.0)
            name, role = layer.rsplit(" ", 1)
            return page.t("lab.share_at", share=page.pct(value), layer=name, tensor=page.t(f"lab.role_{role}"))

        loss = row["final_loss"]
        rows.append(
            {
                head["arm"]: page.t(f"lab.arm_{row['arm']}"),
                head["loss"]: page.num(loss, 4) if loss == loss else page.t("lab.not_finite"),
                head["gap_bf16"]: _gap(page, row["gap_vs_bf16_pct"]),
                head["gap_fp32"]: _gap(page, row["gap_vs_fp32_pct"]),
                head["diverged"]: page.t("live.yes") if row["diverged"] else page.t("live.no"),
                head["flushed"]: share(row["flushed_max"], row["flushed_layer"]),
                head["saturated"]: share(row["saturated_max"], row["saturated_layer"]),
                head["step"]: page.significant(row["time_per_step_ms"], 3),
            }
        )
    return rows


def layer_table(page: Page, result: Any) -> list[dict[str, str]]:
    """An arm below 16 bits: each linear layer's input, weight and gradient, the shares flushed and saturated."""
    head = {k: page.t(f"lab.lcol_{k}") for k in ("layer", "tensor", "values", "flushed", "saturated")}
    return [
        {
            head["layer"]: s.layer,
            head["tensor"]: page.t(f"lab.role_{s.role}"),
            head["values"]: page.num(s.values),
            head["flushed"]: page.pct(s.flushed),
            head["saturated"]: page.pct(s.saturated),
        }
        for s in result.shares
    ]
