"""The palettes stay distinct for the common colour-vision deficiencies, and never carry meaning alone.

Each colour is passed through Machado, Oliveira and Fernandes (2009)'s simulation
of protanopia, deuteranopia and tritanopia at full severity (their matrices, applied
to linear sRGB), and every pair of colours that share a chart must still differ by
at least ``MIN_DELTA_E`` in CIEDE2000 (about the difference between two clearly
different named colours; 2.3 is a just-noticeable difference).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lensa.lessons.common import log_histogram
from lensa.models.gradients import gradient_sample
from lensa.numerics.formats import FORMATS, classify
from lensa.ui import figures

pytestmark = [pytest.mark.numpy_kernels]  # rerun by make test-kernels

MIN_DELTA_E = 12.0

# Machado, Oliveira & Fernandes (2009), "A Physiologically-based Model for Simulation of Color
# Vision Deficiency", IEEE TVCG 15(6), severity 1.0.
MACHADO_2009 = {
    "normal": np.eye(3),
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
    "tritanopia": np.array(
        [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]
    ),
}
_SRGB_TO_XYZ = np.array(
    [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]]
)
_D65 = np.array([0.95047, 1.0, 1.08883])


def linear_rgb(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def cielab(rgb: np.ndarray) -> tuple[float, float, float]:
    xyz = _SRGB_TO_XYZ @ np.clip(rgb, 0, 1) / _D65
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return float(116 * f[1] - 16), float(500 * (f[0] - f[1])), float(200 * (f[1] - f[2]))


def ciede2000(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    """Sharma, Wu & Dalal (2005)'s implementation notes of CIEDE2000, kL = kC = kH = 1."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360
    h2p = math.degrees(math.atan2(b2, a2p)) % 360
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    elif abs(h2p - h1p) <= 180:
        dh = h2p - h1p
    else:
        dh = h2p - h1p - 360 if h2p > h1p else h2p - h1p + 360
    dh_big = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_mean = (h1p + h2p) / 2
    else:
        h_mean = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(h_mean - 30))
        + 0.24 * math.cos(math.radians(2 * h_mean))
        + 0.32 * math.cos(math.radians(3 * h_mean + 6))
        - 0.20 * math.cos(math.radians(4 * h_mean - 63))
    )
    d_theta = 30 * math.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_mean**7 / (cp_mean**7 + 25**7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c = 1 + 0.045 * cp_mean
    s_h = 1 + 0.015 * cp_mean * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt((dl / s_l) ** 2 + (dc / s_c) ** 2 + (dh_big / s_h) ** 2 + r_t * (dc / s_c) * (dh_big / s_h))


def seen_as(hex_colour: str, vision: str) -> tuple[float, float, float]:
    return cielab(MACHADO_2009[vision] @ linear_rgb(hex_colour))


def test_ciede2000_matches_sharma_reference_pairs():
    # Pairs 1, 7 and 17 of Sharma, Wu & Dalal's test data.
    assert ciede2000((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)
    assert ciede2000((50.0, 0.0, 0.0), (50.0, -1.0, 2.0)) == pytest.approx(2.3669, abs=1e-4)
    assert ciede2000((50.0, 2.5, 0.0), (73.0, 25.0, -18.0)) == pytest.approx(27.1492, abs=1e-4)


def test_simulation_merges_red_and_green_for_deuteranopes():
    """The simulation is not the identity: pure red and green come out far closer for a deuteranope."""
    normal = ciede2000(seen_as("#FF0000", "normal"), seen_as("#00FF00", "normal"))
    deutan = ciede2000(seen_as("#FF0000", "deuteranopia"), seen_as("#00FF00", "deuteranopia"))
    assert deutan < normal / 2


@pytest.mark.parametrize("vision", list(MACHADO_2009))
@pytest.mark.parametrize("palette", ["zones", "formats"])
def test_palette_stays_distinct(palette, vision):
    colours = figures.CATEGORY_COLOURS if palette == "zones" else figures.FORMAT_COLOURS
    too_close = [
        (a, b, round(ciede2000(seen_as(ca, vision), seen_as(cb, vision)), 1))
        for (a, ca), (b, cb) in itertools.combinations(colours.items(), 2)
        if ciede2000(seen_as(ca, vision), seen_as(cb, vision)) < MIN_DELTA_E
    ]
    assert too_close == []


def test_zones_differ_by_pattern_as_well_as_colour():
    """Where colour separates FP16's zones (the histogram's bars), a hatching separates them too."""
    patterns = figures.CATEGORY_PATTERNS
    assert set(patterns) == set(figures.CATEGORY_COLOURS)
    assert len(set(patterns.values())) == len(patterns)
    sample = gradient_sample(1e-7) * np.logspace(0, 14, 400)  # reaches every zone, overflow included
    fig = figures.category_histogram(
        log_histogram(sample, classify(sample, FORMATS["fp16"])), {k: k for k in patterns}, [], "x", "n", "{n}", "en"
    )
    shapes = {trace["name"]: trace["marker"]["pattern"]["shape"] for trace in fig.to_dict()["data"]}
    assert shapes == patterns


def test_every_format_that_stores_values_has_a_colour_and_every_value_format_a_pattern():
    """The palette follows the registry: a new format without a colour or a hatching fails here."""
    stored = {k for k, f in FORMATS.items() if f.dtype_name is not None}
    assert set(figures.FORMAT_COLOURS) == stored
    assert set(figures.FORMAT_PATTERNS) == {k for k in stored if FORMATS[k].signed}
    assert len(set(figures.FORMAT_PATTERNS.values())) == len(figures.FORMAT_PATTERNS)
