"""Loss scaling: the static shift of step 3, and a dynamic scaler like PyTorch's.

Backpropagation is linear in the loss, so multiplying the loss by S multiplies
every gradient by S: small gradients move up out of FP16's underflow range.
They are divided by S again in FP32 before clipping and the optimizer step.

:class:`DynamicLossScaler` reproduces ``torch.amp.GradScaler``'s update rule
step for step, including its float32 arithmetic: start at 2**16; a step whose
gradients hold inf or NaN is skipped and the scale is multiplied by 0.5; after
``growth_interval`` clean steps in a row it is multiplied by 2 (unless that
would overflow float32).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict, Unpack

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lensa.numerics.formats import FloatFormat, category_shares, get_format, quantize

TORCH_INIT_SCALE = 2.0**16
TORCH_GROWTH_FACTOR = 2.0
TORCH_BACKOFF_FACTOR = 0.5
TORCH_GROWTH_INTERVAL = 2000


def scale_from_exp(k: int) -> float:
    """The loss scale S = 2**k as a float, exactly (k from -1074 to 1023; beyond, 0 or OverflowError)."""
    return math.ldexp(1.0, int(k))


def loss_scaled(sample: ArrayLike, k: int) -> NDArray[np.float64]:
    """The sample times S = 2**k, exactly (float64, before any format stores it)."""
    return np.ldexp(np.asarray(sample, dtype=np.float64), int(k))


def static_shift_shares(sample: ArrayLike, k: int, fmt: str | FloatFormat = "fp16") -> dict[str, float]:
    """Shares (0..1) of the sample, scaled by 2**k, in each category of ``fmt``."""
    return category_shares(loss_scaled(sample, k), fmt)


StaticRegime = Literal["over", "fits", "subnormal", "none", "some"]


def static_shift_regime(shares: Mapping[str, float], k: int) -> StaticRegime:
    """What a static shift by 2**k did, from its :func:`static_shift_shares`: some values overflow
    (``"over"``), every value is a normal number, with the format's full precision (``"fits"``), none is lost
    but some are still subnormal, with fewer significant bits (``"subnormal"``), values are lost and there is
    no shift (``"none"``, k = 0), or a shift that still loses some (``"some"``)."""
    if shares["overflow"] > 0:
        return "over"
    if shares["zero"] == 0:
        return "subnormal" if shares["subnormal"] > 0 else "fits"
    return "none" if k == 0 else "some"


def per_tensor_scale_exp(values: ArrayLike, fmt: str | FloatFormat, margin: int = 0) -> int:
    """The largest power-of-two scale 2**k that brings the largest magnitude (amax) up to the format's top.

    k = floor(log2(max / amax)) - margin, so amax * S <= max and nothing
    overflows; ``margin`` leaves headroom for growth between steps. Scales
    restricted to powers of two are how the MX formats scale each block (an
    E8M0 shared scale). Transformer Engine's per-tensor FP8 recipe (delayed
    scaling) does not round: its scale is max / amax / 2**margin, with amax
    taken over recent steps. An all-zero or empty tensor gets
    k = 0 (S = 1). inf or NaN in ``values`` raises ValueError: they have no scale.
    """
    f = get_format(fmt)
    a = np.abs(np.asarray(values, dtype=np.float64))
    if not np.all(np.isfinite(a)):
        raise ValueError("values must be finite to choose a scale")
    amax = float(a.max()) if a.size else 0.0
    if amax == 0.0:
        return 0
    return int(np.floor(np.log2(f.max / amax))) - margin


@dataclass
class DynamicLossScaler:
    """The state machine of ``torch.amp.GradScaler``'s dynamic loss scale.

    Call :meth:`update` once per step with whether any gradient was inf or
    NaN; it returns whether the optimizer step is skipped. ``scale`` is kept
    as a float32, as torch keeps it.
    """

    init_scale: float = TORCH_INIT_SCALE
    growth_factor: float = TORCH_GROWTH_FACTOR
    backoff_factor: float = TORCH_BACKOFF_FACTOR
    growth_interval: int = TORCH_GROWTH_INTERVAL
    scale: np.float32 = field(init=False)
    growth_tracker: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.growth_interval < 1:
            raise ValueError("growth_interval must be >= 1")
        self.scale = np.float32(self.init_scale)

    def update(self, found_inf: bool) -> bool:
        """Advance one step; True when the step is skipped (found_inf)."""
        with np.errstate(over="ignore"):
            if found_inf:
                self.scale = np.float32(self.scale * np.float32(self.backoff_factor))
                self.growth_tracker = 0
                return True
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                grown = np.float32(self.scale * np.float32(self.growth_factor))
                if np.isfinite(grown):  # torch never grows the scale to inf
                    self.scale = grown
                self.growth_tracker = 0
        return False


@dataclass(frozen=True)
class ScalerStep:
    """One step of a dynamic loss-scaling run."""

    step: int  # 1-based
    scale: float  # S used for this step's backward pass
    found_inf: bool
    skipped: bool
    scale_after: float  # S after the update, used by the next step


class ScalerArgs(TypedDict, total=False):
    """The keyword arguments of :class:`DynamicLossScaler`, each optional."""

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int


def simulate(found_inf: list[bool], **scaler_args: Unpack[ScalerArgs]) -> list[ScalerStep]:
    """Run a :class:`DynamicLossScaler` over a given pattern of overflowing steps."""
    scaler = DynamicLossScaler(**scaler_args)
    out = []
    for i, inf in enumerate(found_inf, start=1):
        used = float(scaler.scale)
        skipped = scaler.update(bool(inf))
        out.append(ScalerStep(i, used, bool(inf), skipped, float(scaler.scale)))
    return out


# --- the illustrative run of step 3 ------------------------------------------


@dataclass(frozen=True)
class SpikeModel:
    """A stated, seeded model of the largest gradient magnitude in each step.

    Each step's largest |gradient| (before scaling) is
    ``typical_max * 10**(noise_decades * z)`` with z standard normal; with
    probability ``spike_probability`` a spike multiplies it by
    ``10**u``, u uniform in ``spike_decades``. A step overflows when that
    largest gradient times S no longer fits in FP16 (it rounds to inf).
    The growth interval is short so the whole story fits a small chart;
    PyTorch waits 2000 clean steps.
    """

    steps: int = 40
    typical_max: float = 2e-2
    noise_decades: float = 0.2
    spike_probability: float = 0.12
    spike_decades: tuple[float, float] = (1.0, 3.0)
    growth_interval: int = 5
    seed: int = 7

    def largest_gradients(self) -> NDArray[np.float64]:
        """Largest unscaled |gradient| of every step (float64, length ``steps``)."""
        rng = np.random.default_rng(self.seed)
        z = rng.standard_normal(self.steps)
        spikes = rng.random(self.steps) < self.spike_probability
        lo, hi = self.spike_decades
        size = rng.uniform(lo, hi, self.steps)
        return self.typical_max * 10.0 ** (self.noise_decades * z + np.where(spikes, size, 0.0))


def dynamic_run(model: SpikeModel | None = None, fmt: str | FloatFormat = "fp16") -> list[ScalerStep]:
    """Step 3's illustrative dynamic loss-scaling run, GradScaler's rule on the spike model."""
    model = model or SpikeModel()
    f = get_format(fmt)
    scaler = DynamicLossScaler(growth_interval=model.growth_interval)
    out = []
    for i, g in enumerate(model.largest_gradients(), start=1):
        used = float(scaler.scale)
        inf = bool(np.isinf(quantize(g * used, f)))
        skipped = scaler.update(inf)
        out.append(ScalerStep(i, used, inf, skipped, float(scaler.scale)))
    return out
