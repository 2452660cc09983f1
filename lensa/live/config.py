"""A live comparison's settings: :class:`RunConfig`, its limits, its time model and its one validator."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lensa.live.clock import CostModel, machine_clock
from lensa.live.device import DEVICES, resolve_device
from lensa.live.errors import LiveError
from lensa.live.schedule import log_spaced_steps
from lensa.numerics.training_recipes import TRAINING_RECIPES, model_passes

Progress = Callable[[float, str], None]
ShouldStop = Callable[[], bool]

ARMS: tuple[str, ...] = ("fp32", "fp16", "bf16")
ARM_LABELS: dict[str, str] = {
    "fp32": "FP32 baseline",
    "fp16": "FP16 autocast + GradScaler",
    "bf16": "BF16 autocast",
    **{key: r.label for key, r in TRAINING_RECIPES.items()},
}
LOWP_ARMS: tuple[str, ...] = tuple(TRAINING_RECIPES)
"""The arms below 16 bits: one per recipe of :data:`lensa.numerics.training_recipes.TRAINING_RECIPES`, emulated by
:mod:`lensa.live.lowp` (each linear layer's three products read quantized operands, in FP32)."""
ALL_ARMS: tuple[str, ...] = ARMS + LOWP_ARMS
"""Every arm a comparison may ask for; the lab's default comparison of all the recipes runs them all."""


LIMITS: dict[str, tuple[float, float]] = {
    "width": (8, 4096),
    "depth": (1, 8),
    "batch_size": (8, 16384),
    "features": (2, 2048),
    "steps": (1, 1000),
    "warmup_steps": (1, 50),
    "lr": (1e-5, 1.0),
    "clip_grad_norm": (0.01, 100.0),
    "eval_size": (64, 16384),
    "seed": (0, 2**31 - 1),
}
"""Inclusive (min, max) of every numeric :class:`RunConfig` field.

``clip_grad_norm`` may also be None (no clipping). On their own these ranges
do not bound the run time (the largest width times the largest batch is a
lot of work), so :meth:`RunConfig.validate` also refuses a run whose
:meth:`RunConfig.estimate_seconds` is over :data:`MAX_RUN_SECONDS`.
"""

MAX_RUN_SECONDS: dict[str, float] = {"cpu": 30.0, "cuda": 60.0}
"""Longest estimated run, all arms together (seconds), per device kind."""

RECIPES_RUN_SECONDS = 20.0
"""The lab's default comparison of all the recipes (:data:`ALL_ARMS`, not recorded) is sized to this estimate at most,
so with an estimate within 1.5x of the truth it still ends within the CPU's 30 s; :func:`recipes_defaults_for`
picks it from the calibration."""

DEFAULT_RUN_SECONDS = 12.0
"""The lab's default comparison (recorded, three arms) is sized to this estimate at most, so with an estimate
within 1.25x of the truth it still ends within 15 s; :func:`defaults_for` picks it from the calibration."""

TRAIN_SET_BYTES: dict[str, int] = {"cpu": 64 * 2**20, "cuda": 2**30}
"""Cap on the pre-generated training set per device (FP32 inputs and labels, bytes); past it, batches repeat."""

_INT_FIELDS = ("width", "depth", "batch_size", "features", "steps", "warmup_steps", "eval_size", "seed")


@dataclass(frozen=True)
class RunConfig:
    """One live comparison's settings.

    The model is an MLP: ``features`` inputs, ``depth`` hidden layers of
    ``width`` units (Linear + ReLU each), one output logit. Each training step
    takes the next batch of ``batch_size`` samples from a training set drawn
    once (:meth:`train_batches` batches, so usually every step sees new
    samples and the model cannot just memorise one batch); accuracy is
    measured on ``eval_size`` further samples. Warm-up steps run before the
    clock starts and are not part of the measured steps.
    ``record``: attach a :class:`~lensa.live.capture.Recorder` to each arm, at
    :meth:`recorded_steps` (about 12, log-spaced), so the comparison returns
    each arm's :class:`~lensa.runstats.RunStats`; its cost is in
    :meth:`estimate_seconds`, and the recorded steps run off the clock.
    The defaults are sized for a CPU: a few seconds for all three arms, with a
    clear BF16 speed-up where the CPU has bf16 matrix units (AMX).
    """

    width: int = 512
    depth: int = 3
    batch_size: int = 1024
    features: int = 64
    steps: int = 60
    warmup_steps: int = 3
    lr: float = 1e-3
    clip_grad_norm: float | None = 1.0
    eval_size: int = 4096
    seed: int = 0
    device: str = "auto"
    record: bool = False

    def matmul_macs_per_sample(self) -> int:
        """Multiply-adds of one sample's forward pass through the Linear layers."""
        return self.features * self.width + (self.depth - 1) * self.width * self.width + self.width

    def parameters(self) -> int:
        """Number of trainable parameters (weights and biases)."""
        return self.matmul_macs_per_sample() + self.depth * self.width + 1

    def train_flop(self) -> float:
        """FLOP of one arm's training, warm-up included: 6 x multiply-adds x samples x steps.

        2 FLOP per multiply-add forward and 4 backward, the usual estimate
        (see :mod:`lensa.models.speed`); elementwise work and the optimizer are left
        out, so real runs do a little more.
        """
        return 6.0 * self.matmul_macs_per_sample() * self.batch_size * (self.steps + self.warmup_steps)

    def recorded_steps(self) -> tuple[int, ...]:
        """The measured steps (1-based) the Recorder summarises when ``record`` is on; () when it is off."""
        return log_spaced_steps(self.steps) if self.record else ()

    def recorded_values(self) -> int:
        """Values the Recorder summarises at one recorded step of one arm.

        Every parameter three times (weight, gradient, update) and, for the
        output of every Linear and ReLU, the output and its gradient.
        """
        outputs = self.batch_size * (2 * self.depth * self.width + 1)
        return 3 * self.parameters() + 2 * outputs

    def recorded_tensors(self) -> int:
        """Tensors the Recorder summarises at one recorded step of one arm (see :meth:`recorded_values`)."""
        return 3 * 2 * (self.depth + 1) + 2 * (2 * self.depth + 1)

    def train_batches(self, device_kind: str = "cpu") -> int:
        """Distinct training batches: one per step, up to :data:`TRAIN_SET_BYTES` of data (then reused in epochs)."""
        per_batch = self.batch_size * (self.features + 1) * 4
        return max(1, min(self.steps, TRAIN_SET_BYTES[device_kind] // per_batch))

    def linear_shapes(self) -> list[tuple[int, int, int, bool]]:
        """The MLP's linear layers as (m, k, n, dgrad): a step's batch, inputs, outputs, and whether the layer's
        input needs a gradient (not the first layer's: the data)."""
        sizes = [self.features] + [self.width] * self.depth + [1]
        return [(self.batch_size, k, n, i > 0) for i, (k, n) in enumerate(itertools.pairwise(sizes))]

    def counted_steps(self) -> tuple[int, ...]:
        """The measured steps (1-based) at which an arm below 16 bits counts what its quantizations flush and
        saturate, per layer: about 12, log-spaced (:func:`lensa.live.schedule.log_spaced_steps`)."""
        return log_spaced_steps(self.steps)

    def quantize_seconds(self, clock: CostModel, arm: str) -> tuple[float, float]:
        """(seconds per step, seconds more per counted step) that ``arm``'s quantizations add, from ``clock``'s
        timing of each kind of pass (:func:`lensa.numerics.training_recipes.pass_class`); (0, 0) for the 16- and 32-bit
        arms."""
        if arm not in TRAINING_RECIPES:
            return 0.0, 0.0
        per_step = clock.lowp_layer_s * (self.depth + 1)
        counted = 0.0
        for p, cls in model_passes(TRAINING_RECIPES[arm], self.linear_shapes()):
            fixed, per_value = clock.pass_cost(cls)
            per_step += fixed + p.values * per_value
            counted += clock.count_pass_s + p.values * clock.count_value_s
        return per_step, counted

    def arm_seconds(self, clock: CostModel, arm: str) -> float:
        """Estimated seconds of one arm from ``clock``: its steps (warm-up included), evaluation, set-up, recording.

        An arm below 16 bits runs the FP32 arm's step (its products are FP32) and its quantizations
        (:meth:`quantize_seconds`), and counts its losses at :meth:`counted_steps`."""
        timed = "fp32" if arm in TRAINING_RECIPES else arm
        quantize_s, count_s = self.quantize_seconds(clock, arm)
        per_step = (
            clock.layer_step_s[timed] * (self.depth + 1)
            + clock.param_step_s[timed] * self.parameters()
            + 6.0 * self.matmul_macs_per_sample() * self.batch_size / clock.rate(timed, self.width)
            + quantize_s
        )
        eval_s = 2.0 * self.matmul_macs_per_sample() * self.eval_size / clock.flop_per_s["fp32"]
        per_recorded_step = clock.record_scale.get(arm, 1.0) * (
            self.recorded_values() * clock.record_value_s + self.recorded_tensors() * clock.record_tensor_s
        )
        record_s = len(self.recorded_steps()) * per_recorded_step
        counted_s = len(self.counted_steps()) * count_s
        return (self.steps + self.warmup_steps) * per_step + eval_s + clock.arm_s + record_s + counted_s

    def data_seconds(self, clock: CostModel) -> float:
        """Estimated seconds to draw the run's training and evaluation data once (shared by the arms)."""
        values = (self.train_batches(clock.device) * self.batch_size + self.eval_size) * (self.features + 1)
        return values * clock.data_value_s

    def estimate_seconds(
        self, device_kind: str | None = None, arms: Sequence[str] = ARMS, clock: CostModel | None = None
    ) -> float:
        """Estimate (seconds) of a :func:`compare` call over ``arms``, warm-up, evaluation and data included.

        From ``clock``, this machine's calibrated :class:`~lensa.live.clock.CostModel`; None takes this
        process's (:func:`~lensa.live.clock.machine_clock`, which imports torch and calibrates on first
        use). ``device_kind`` None resolves ``self.device``. With ``record``, each arm's recorded steps
        also cost what summarising their tensors does.
        """
        arms = _check_arms(arms)
        kind = _device_kind(device_kind, self.device)
        clock = clock if clock is not None else machine_clock(kind)
        return self.data_seconds(clock) + sum(self.arm_seconds(clock, arm) for arm in arms)

    def validate(
        self, device_kind: str | None = None, arms: Sequence[str] = ARMS, clock: CostModel | None = None
    ) -> RunConfig:
        """Return ``self`` when every field is in :data:`LIMITS` and the run fits :data:`MAX_RUN_SECONDS`.

        ``device_kind`` ("cpu" or "cuda") chooses the limit; None resolves
        ``self.device`` (which imports torch for ``"auto"``); ``clock`` as in
        :meth:`estimate_seconds`. Raises ``LiveError(kind="invalid")`` naming
        the first field out of range, ``kind="too_long"`` with the estimated
        time, or ``kind="no_cuda"`` for ``device="cuda"`` without CUDA. Needs
        no torch when ``device_kind`` and ``clock`` are given.
        """
        problems = _field_problems(self)
        if problems:
            raise LiveError("invalid", problems[0])
        kind = _device_kind(device_kind, self.device)
        need, limit = self.estimate_seconds(kind, arms, clock), MAX_RUN_SECONDS[kind]
        if need > limit:
            raise LiveError(
                "too_long",
                f"This run would take about {need:.0f} s on the {kind.upper()}, more than the {limit:.0f} s allowed. "
                "Lower the width, depth, batch size or number of steps.",
                (need, limit),
            )
        return self

    def clamped(
        self, device_kind: str | None = None, arms: Sequence[str] = ARMS, clock: CostModel | None = None
    ) -> RunConfig:
        """A copy with every numeric field moved into :data:`LIMITS`, then steps cut to fit :data:`MAX_RUN_SECONDS`.

        Non-integers in integer fields are rounded. Raises
        ``LiveError(kind="invalid")`` for an unknown device or a non-number,
        and when even one step is over the time limit (then width, depth or
        batch size must come down, which this helper does not guess).
        """
        if self.device not in DEVICES:
            raise LiveError("invalid", f"device must be one of {', '.join(DEVICES)} (got {self.device!r}).")
        changes: dict[str, Any] = {}
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            if value is None and name == "clip_grad_norm":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise LiveError("invalid", f"{name} must be a number (got {value!r}).")
            clipped = min(max(value, lo), hi)
            changes[name] = round(clipped) if name in _INT_FIELDS else float(clipped)
        out = replace(self, **changes)
        kind = _device_kind(device_kind, out.device)
        limit = MAX_RUN_SECONDS[kind]
        # The estimate is affine in steps (with recording, at most that line, as at most every step is recorded):
        # solve for the most steps that fit.
        clock = clock if clock is not None else machine_clock(kind)
        at_one = replace(out, steps=1).estimate_seconds(kind, arms, clock)
        per_step = replace(out, steps=2).estimate_seconds(kind, arms, clock) - at_one
        if at_one > limit:
            raise LiveError(
                "invalid",
                "Even one training step of this model is over the time limit. Lower the width, depth, batch size, "
                "evaluation samples or warm-up steps.",
            )
        fit = 1 + int((limit - at_one) // per_step)
        return replace(out, steps=min(out.steps, fit))


def _device_kind(device_kind: str | None, device: str) -> str:
    if device_kind is None:
        return resolve_device(device)
    if device_kind not in MAX_RUN_SECONDS:
        raise LiveError("invalid", f"device_kind must be 'cpu' or 'cuda' (got {device_kind!r}).")
    return device_kind


def _field_problems(cfg: RunConfig) -> list[str]:
    out = []
    if cfg.device not in DEVICES:
        out.append(f"device must be one of {', '.join(DEVICES)} (got {cfg.device!r}).")
    if not isinstance(cfg.record, bool):
        out.append(f"record must be True or False (got {cfg.record!r}).")
    for name, (lo, hi) in LIMITS.items():
        value = getattr(cfg, name)
        if name == "clip_grad_norm" and value is None:
            continue
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                out.append(f"{name} must be a whole number (got {value!r}).")
                continue
        elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            out.append(f"{name} must be a finite number (got {value!r}).")
            continue
        if not lo <= value <= hi:
            out.append(f"{name} must be between {lo:g} and {hi:g} (got {value:g}).")
    return out


GPU_CONFIG = RunConfig(width=4096, depth=4, batch_size=8192, features=256, steps=100, warmup_steps=5, lr=1e-4)
"""A comparison sized for a data-centre GPU: 2.5 TFLOP per step, seconds per arm on an A100/H100-class GPU."""


def suggested_config(device_kind: str) -> RunConfig:
    """The default :class:`RunConfig` for ``"cpu"`` (a few seconds) or :data:`GPU_CONFIG` for ``"cuda"``."""
    if device_kind == "cuda":
        return replace(GPU_CONFIG, device="cuda")
    return RunConfig(device="cpu")


DEFAULT_CANDIDATES: tuple[tuple[int, int, int], ...] = (
    (512, 1024, 60),
    (512, 1024, 30),
    (256, 1024, 30),
    (256, 512, 30),
    (128, 512, 30),
    (128, 256, 20),
    (64, 256, 20),
    (64, 128, 10),
    (64, 64, 10),
)
"""(width, batch size, steps) the lab's defaults are chosen from, largest first: fewer steps, then a smaller
width and batch. Every value is one of the lab page's slider stops."""


def defaults_for(clock: CostModel, base: RunConfig | None = None) -> RunConfig:
    """The largest of :data:`DEFAULT_CANDIDATES` (on ``base``, recorded) that ``clock`` puts within
    :data:`DEFAULT_RUN_SECONDS` for the three arms; the smallest when none does."""
    base = replace(base or RunConfig(device=clock.device), record=True)
    for width, batch, steps in DEFAULT_CANDIDATES:
        cfg = replace(base, width=width, batch_size=batch, steps=steps)
        if cfg.estimate_seconds(clock.device, ARMS, clock) <= DEFAULT_RUN_SECONDS:
            return cfg
    return cfg


RECIPES_CANDIDATES: tuple[tuple[int, int, int], ...] = (
    (256, 1024, 60),
    (256, 512, 60),
    (128, 512, 60),
    (128, 256, 60),
    (128, 256, 30),
    (64, 256, 30),
    (64, 128, 30),
    (64, 64, 20),
    (64, 64, 10),
)
"""(width, batch size, steps) the default comparison of all the recipes is chosen from, largest first; every value
one of the lab page's slider stops."""


def recipes_defaults_for(clock: CostModel, base: RunConfig | None = None) -> RunConfig:
    """The largest of :data:`RECIPES_CANDIDATES` (on ``base``, not recorded) that ``clock`` puts within
    :data:`RECIPES_RUN_SECONDS` for :data:`ALL_ARMS`; the smallest when none does."""
    base = replace(base or RunConfig(device=clock.device), record=False)
    for width, batch, steps in RECIPES_CANDIDATES:
        cfg = replace(base, width=width, batch_size=batch, steps=steps)
        if cfg.estimate_seconds(clock.device, ALL_ARMS, clock) <= RECIPES_RUN_SECONDS:
            return cfg
    return cfg


def _check_arms(arms: Sequence[str]) -> tuple[str, ...]:
    arms = tuple(arms)
    if not arms:
        raise LiveError("invalid", "Choose at least one arm (fp32, fp16 or bf16).")
    unknown = [a for a in arms if a not in ALL_ARMS]
    if unknown:
        raise LiveError("invalid", f"Unknown arm {unknown[0]!r}; choose from {', '.join(ALL_ARMS)}.")
    if len(set(arms)) != len(arms):
        raise LiveError("invalid", "Each arm may be asked for only once.")
    return arms
