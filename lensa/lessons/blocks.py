"""The block scaling page's view: one block of gradient-like values with one outlier, as each recipe stores it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from lensa.numerics import blockscale
from lensa.numerics.formats import FORMATS

# Side by side: MXFP8 with OCP's scale and with the scale rounded up, MXFP6, MXFP4 and NVFP4.
SHOWN = ("mxfp8_e4m3", "mxfp8_e4m3_ceil", "mxfp6_e2m3", "mxfp4_e2m1", "nvfp4")
OUTLIER_AT = 5  # the value the learner drags (the sixth)
SEED = 21
BLOCK_VALUES = 32
# FP4 E2M1's smallest non-zero value, and the tie halfway to it: a scaled value at or below the tie rounds to 0
# (the tie itself to 0, the neighbour whose last bit is even), one above it up to the smallest.
FP4_SMALLEST = FORMATS["fp4_e2m1"].smallest_subnormal
FP4_FLUSH_TIE = FP4_SMALLEST / 2
# Which 4-bit recipes flush values to 0: MXFP4 more than NVFP4, both alike, or none.
FlushRegime = Literal["flush", "both_flush", "nothing_flushed"]


def gradient_block(n: int, grad: float, outlier: float) -> NDArray[np.float32]:
    """``n`` gradient-like values (a fixed normal sample times ``grad``), value 6 set to 2**outlier times the
    largest of the others."""
    x = (np.random.default_rng(SEED).standard_normal(BLOCK_VALUES)[:n] * grad).astype(np.float32)
    others = np.abs(np.delete(x, OUTLIER_AT))
    x[OUTLIER_AT] = np.float32(float(others.max()) * 2.0**outlier)
    return x


@dataclass(frozen=True)
class RecipeOnBlock:
    """One recipe on the block: what it stores, what became of each value, its shares lost, and its scales
    (E8M0 exponents for MX recipes; NVFP4's E4M3 block scales and FP32 tensor scale)."""

    recipe: blockscale.Recipe
    encoded: blockscale.Encoded
    outcomes: tuple[str, ...]
    lost: blockscale.Lost
    scale_exps: tuple[int, ...]


@dataclass(frozen=True)
class BlocksView:
    """The block page at one (n, grad, outlier): the block, each recipe on it, and the regimes the paragraph
    names. ``times`` is 2**outlier, how far the outlier stands above the others."""

    n: int
    grad: float
    outlier: float
    values: NDArray[np.float32]
    recipes: dict[str, RecipeOnBlock]
    times: float

    @property
    def positions(self) -> tuple[int, ...]:
        """The values' positions as a reader counts them: 1 to n."""
        return tuple(range(1, self.n + 1))

    @property
    def outlier_position(self) -> int:
        return OUTLIER_AT + 1

    @property
    def flush_regime(self) -> FlushRegime:
        """Which 4-bit recipes flush values to 0: MXFP4 more than NVFP4 ("flush"), both ("both_flush"), none."""
        mx4, nv4 = self.recipes["mxfp4_e2m1"].lost, self.recipes["nvfp4"].lost
        if mx4.flushed > nv4.flushed:
            return "flush"
        return "both_flush" if mx4.flushed > 0 else "nothing_flushed"

    @property
    def floor_regime(self) -> blockscale.FloorRegime:
        """Where MXFP8 with OCP's (floor) scale stands on the block: fits, rounds back, or saturates
        (:func:`lensa.numerics.blockscale.floor_regime`)."""
        return blockscale.floor_regime(self.values, "mxfp8_e4m3")


def outlier_times(outlier: float) -> float:
    """How many times the largest of the other values the outlier is: 2**outlier."""
    return float(2.0**outlier)


def _scale_exps(enc: blockscale.Encoded) -> tuple[int, ...]:
    return tuple(int(math.log2(float(s))) for s in enc.block_scales)


def blocks_view(n: int, grad: float, outlier: float) -> BlocksView:
    """The block page's view: ``n`` values of typical size ``grad``, the sixth 2**``outlier`` times the others'
    largest."""
    x = gradient_block(n, grad, outlier)
    x.setflags(write=False)
    recipes = {}
    for key in SHOWN:
        r = blockscale.RECIPES[key]
        enc = blockscale.encode(x, r)
        marks = tuple(str(m) for m in blockscale.outcomes(x, enc))
        exps = () if r.two_level else _scale_exps(enc)
        recipes[key] = RecipeOnBlock(r, enc, marks, blockscale.lost(x, r), exps)
    return BlocksView(n, grad, outlier, x, recipes, outlier_times(outlier))
