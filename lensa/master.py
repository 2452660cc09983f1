"""Accumulating small updates in a given format: why master weights stay in FP32.

Every addition is rounded to the format, as a weight tensor stored in that
format would be after each optimizer step. Sums are formed in float64 and then
rounded once; for formats no wider than FP32 this equals the correctly rounded
sum (when float64 itself rounds, the addend is far below half a spacing of the
format and the result is the larger operand either way).
"""

from __future__ import annotations

from lensa.formats import FloatFormat, get_format, quantize, scalar_rounder


def round_scalar(value: float, fmt: str | FloatFormat) -> float:
    """Round one Python float to ``fmt`` (same rules as :func:`lensa.formats.quantize`)."""
    return float(quantize(float(value), fmt))


def accumulate(w: float, update: float, steps: int, fmt: str | FloatFormat) -> float:
    """The weight after adding ``update`` to ``w`` ``steps`` times in ``fmt``.

    ``w`` is first stored in ``fmt``, ``update`` is the value the optimizer
    computed in that format (so it is rounded too), and every sum is rounded
    to ``fmt``. ``steps`` must be a non-negative int. Once a sum rounds back
    to the same weight the rest of the updates are lost as well, so the loop
    stops there. inf or NaN in, inf or NaN out.
    """
    if steps < 0:
        raise ValueError("steps must be >= 0")
    f = get_format(fmt)
    rnd = scalar_rounder(f)  # the loop rounds one value at a time: quantize's numpy overhead would dominate
    value = rnd(float(w))
    step = rnd(float(update))
    for _ in range(steps):
        new = rnd(value + step)
        if new == value:
            break
        value = new
    return value


def total_change(w: float, update: float, steps: int, fmt: str | FloatFormat) -> float:
    """accumulate(...) minus the stored starting weight: what the updates achieved."""
    start = round_scalar(w, fmt)
    return accumulate(w, update, steps, fmt) - start


def is_update_lost(w: float, update: float, fmt: str | FloatFormat) -> bool:
    """True when w + update, rounded to ``fmt``, is the stored w again."""
    f = get_format(fmt)
    start = round_scalar(w, f)
    return round_scalar(start + round_scalar(update, f), f) == start
