"""What several steps' views share: a histogram on a log axis split by what a format does to each value, and a
format's range as the figures draw it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from lensa.numerics.formats import FORMATS, category_shares, classify, get_format

# What a format does to a value, in the order the figures stack and list them.
CATEGORIES = ("zero", "subnormal", "normal", "overflow")
# The histogram axis of steps 2 and 3 (log10 of the magnitude) and its bins.
HIST_LO, HIST_HI = -12, 8
BINS_PER_DECADE = 4


@dataclass(frozen=True)
class LogHistogram:
    """Counts per bin of log10 |x|, one row of counts per category (every category, zeros included).

    ``edges`` are the bins' log10 edges (len = bins + 1). Values outside the axis are counted in its first or
    last bin.
    """

    edges: tuple[float, ...]
    counts: Mapping[str, tuple[int, ...]]
    total: int

    @property
    def centres(self) -> tuple[float, ...]:
        return tuple((a + b) / 2 for a, b in zip(self.edges[:-1], self.edges[1:], strict=True))

    @property
    def width(self) -> float:
        """The width of a bin, in decades."""
        return self.edges[1] - self.edges[0]

    @property
    def tallest(self) -> int:
        """The largest count of a bin, all categories stacked (0 for an empty histogram)."""
        stacked = [sum(col) for col in zip(*self.counts.values(), strict=True)]
        return max(stacked, default=0)

    def occupied(self) -> tuple[int, ...]:
        """The indices of the bins that hold a value."""
        return tuple(i for i in range(len(self.edges) - 1) if any(c[i] for c in self.counts.values()))

    def share(self, category: str) -> float:
        """The share of all values in ``category`` (0 for an empty histogram)."""
        return sum(self.counts[category]) / self.total if self.total else 0.0


def log_histogram(
    values: ArrayLike,
    categories: ArrayLike,
    lo: int = HIST_LO,
    hi: int = HIST_HI,
    bins_per_decade: int = BINS_PER_DECADE,
) -> LogHistogram:
    """Count positive finite ``values`` per bin of log10 from ``lo`` to ``hi``, split by their ``categories``."""
    edges = np.linspace(lo, hi, (hi - lo) * bins_per_decade + 1)
    logs = np.clip(np.log10(np.asarray(values, dtype=np.float64)), lo, hi - 1e-9)
    index = np.digitize(logs, edges) - 1
    cats = np.asarray(categories)
    counts = {
        cat: tuple(int(n) for n in np.bincount(index[cats == cat], minlength=len(edges) - 1)) for cat in CATEGORIES
    }
    return LogHistogram(tuple(float(e) for e in edges), counts, int(cats.size))


def format_histogram(values: ArrayLike, fmt: str) -> LogHistogram:
    """:func:`log_histogram` of ``values`` split by what format ``fmt`` does to each."""
    return log_histogram(values, classify(values, FORMATS[fmt]))


@dataclass(frozen=True)
class FormatLimits:
    """A format's range as a figure draws it: smallest subnormal, smallest normal, largest finite (magnitudes)."""

    key: str
    label: str
    smallest_subnormal: float
    smallest_normal: float
    max: float


def limits_of(key: str) -> FormatLimits:
    f = get_format(key)
    return FormatLimits(key, f.label, f.smallest_subnormal, f.smallest_normal, f.max)


@dataclass(frozen=True)
class FormatOnSample:
    """What one format does to a sample: its range and the shares of the sample in each category."""

    limits: FormatLimits
    shares: Mapping[str, float]

    @property
    def key(self) -> str:
        return self.limits.key


def formats_on(values: ArrayLike, keys: Sequence[str]) -> tuple[FormatOnSample, ...]:
    """Each format of ``keys`` on ``values``: its limits and :func:`lensa.numerics.formats.category_shares`."""
    return tuple(FormatOnSample(limits_of(k), category_shares(values, k)) for k in keys)


def shares_of(formats: Sequence[FormatOnSample]) -> dict[str, Mapping[str, float]]:
    """{format key: its shares} of :func:`formats_on`'s result."""
    return {f.key: f.shares for f in formats}


@dataclass(frozen=True)
class LogCounts:
    """Counts per bin of log10 |x| for one group of values (``edges``: log10 edges, len = bins + 1)."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def centres(self) -> tuple[float, ...]:
        return tuple((a + b) / 2 for a, b in zip(self.edges[:-1], self.edges[1:], strict=True))

    @property
    def width(self) -> float:
        return self.edges[1] - self.edges[0]


def log_counts(values: ArrayLike, lo: int, hi: int, bins_per_decade: int = BINS_PER_DECADE) -> LogCounts:
    """Positive finite ``values`` counted per bin of log10 from ``lo`` to ``hi`` (outside: the end bins)."""
    edges = np.linspace(lo, hi, (hi - lo) * bins_per_decade + 1)
    logs = np.clip(np.log10(np.asarray(values, dtype=np.float64)), lo, hi - 1e-9)
    counts = np.bincount(np.digitize(logs, edges) - 1, minlength=len(edges) - 1)
    return LogCounts(tuple(float(e) for e in edges), tuple(int(n) for n in counts))
