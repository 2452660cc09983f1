"""The pages of the app, in navigation order, with the URL parameters each one owns.

:data:`PAGES` is the one list of pages: the navigation, the overview's list of steps, "step n of N", the count
of steps the text says, the load generator's learners and the tests' page lists all derive from it. Adding a
step is a page file, a core module, its catalogue entries, and one entry here (README.md, "Adding a step").
"""

from __future__ import annotations

from dataclasses import dataclass

from lensa.models.configs import DEFAULT_PRESET, PRESETS
from lensa.models.memory import CHECKPOINTING, OPTIMIZERS
from lensa.models.speed import DEFAULT_GPU, DEFAULT_MFU, GPUS
from lensa.numerics.blockscale import RECIPES
from lensa.numerics.exact import try_parse_exact
from lensa.numerics.formats import FormatGroup
from lensa.numerics.training_recipes import TRAINING_RECIPES
from lensa.runstats import KINDS
from lensa.ui.controls import (
    ChoiceControl,
    Control,
    CountControl,
    NumberControl,
    TextControl,
    log_stops,
    power_of_two_stops,
)
from lensa.ui.glossary import TERM_KEYS


@dataclass(frozen=True)
class PageInfo:
    key: str  # also the catalogue section and the URL path
    file: str  # relative to the app root
    step: int | None  # the lesson steps are numbered 1, 2, ... in the order of PAGES; None for the other pages
    controls: tuple[Control, ...] = ()

    def control(self, name: str) -> Control:
        return next(c for c in self.controls if c.name == name)


TOKENS_STOPS = power_of_two_stops(512, 32768)
# Step 3's k in S = 2**k. To 2^32, not the seed's 2^24: past 2^25 the largest of the illustration's gradients
# (1.6e-3) overflow FP16, so the slider shows what too large a scale costs. GradScaler's scale is a float32 that
# keeps doubling while the steps are clean; nothing caps it at 2^24.
LOSS_SCALE_EXPONENTS = tuple(range(33))
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Steps 2, 3 and 5 can also show the narrower format groups of lensa.numerics.formats: FP8, and FP6 with FP4 (OCP MX's
# element formats); none by default, so the lesson reads as the seed's.
ALSO = ChoiceControl("also", ("none", "fp8", "narrow", "all"), "none")
# What each choice adds, as format groups of the registry (lensa.numerics.formats.FloatFormat.group).
ALSO_GROUPS: dict[str, tuple[FormatGroup, ...]] = {
    "none": (),
    "fp8": ("fp8",),
    "narrow": ("narrow",),
    "all": ("fp8", "narrow"),
}
# Links made before the choice existed: ?fp8=on (the "Also show FP8" switch) means also=fp8.
LEGACY_PARAMS: dict[str, tuple[str, dict[str, str]]] = {"fp8": ("also", {"on": "fp8", "off": "none"})}
# Steps 2-5 can show a recorded run instead of the illustration (the default, so the lesson reads as the seed's).
DATA_SOURCES = ("illustration", "reference", "lab", "upload")
DATA = ChoiceControl("data", DATA_SOURCES, "illustration")
# Read only with measured data. The layers and steps are the run's own, known once it is loaded: these are
# the declarations, and the page draws them with the run's names and steps (lensa/ui/recorded_run.py).
MEASURED_ONLY = ("kind", "layer", "step", "recipe")
LAYER = ChoiceControl("layer", ("all",), "all")
STEP = NumberControl("step", (1,), 1, integer=True)
# The block recipe whose shares a recorded run's tables show (file version 2; lensa.numerics.blockscale.RECIPES).
RECIPE = ChoiceControl("recipe", tuple(RECIPES), "mxfp8_e4m3")


def measured_controls(kinds: tuple[str, ...] = KINDS, default_kind: str = "weight_grad") -> tuple[Control, ...]:
    return (DATA, ChoiceControl("kind", kinds, default_kind), LAYER, STEP)


PAGES: tuple[PageInfo, ...] = (
    PageInfo("overview", "app.py", None),
    PageInfo(
        "memory",
        "pages/memory.py",
        1,
        (
            ChoiceControl("precision", ("mixed", "fp32"), "mixed"),
            NumberControl("tokens", TOKENS_STOPS, 2048, log=True, integer=True),
            ChoiceControl("model", (*PRESETS, "custom"), DEFAULT_PRESET),
            # Typed, not a slider: a custom size is kept exactly (GPT-3's 175e9, the ZeRO paper's 7.5B).
            CountControl("params", 7e9, 1e8, 1e12),
            ChoiceControl("optimizer", OPTIMIZERS, "adam"),
            NumberControl("zero", (0, 1, 2, 3), 0, integer=True),
            NumberControl("gpus", GPU_COUNTS, 1, log=True, integer=True),
            ChoiceControl("checkpointing", CHECKPOINTING, "none"),
            ChoiceControl("attention", ("flash", "stored"), "flash"),
            NumberControl("gpu_gb", (24, 40, 48, 80, 94, 141, 192), 80, integer=True),
        ),
    ),
    PageInfo(
        "fp16_range",
        "pages/fp16_range.py",
        2,
        (NumberControl("grad", log_stops(-9, -1), 1e-6, log=True), ALSO, *measured_controls(), RECIPE),
    ),
    PageInfo(
        "loss_scaling",
        "pages/loss_scaling.py",
        3,
        (NumberControl("scale", LOSS_SCALE_EXPONENTS, 0, integer=True), ALSO, *measured_controls(), RECIPE),
    ),
    PageInfo(
        "master_weights",
        "pages/master_weights.py",
        4,
        (
            NumberControl("update", log_stops(-8, -2), 1e-6, log=True),
            NumberControl("w", (0.01, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0, 1000.0), 1.0, log=True),
            # Step 4 is about updates: only they say what a weight would lose.
            *measured_controls(("update",), "update"),
        ),
    ),
    PageInfo(
        "bf16",
        "pages/bf16.py",
        5,
        (NumberControl("grad", log_stops(-12, -2), 1e-8, log=True), ALSO, *measured_controls(), RECIPE),
    ),
    PageInfo(
        "speed",
        "pages/speed.py",
        6,
        (
            NumberControl("tokens", TOKENS_STOPS, 4096, log=True, integer=True),
            ChoiceControl("gpu", tuple(GPUS), DEFAULT_GPU),
            NumberControl("mfu", tuple(round(0.05 * i, 2) for i in range(2, 17)), DEFAULT_MFU),
            NumberControl("budget", log_stops(9, 13, (1, 2, 3, 5)), 2e12, log=True),
            NumberControl("cluster", (*GPU_COUNTS, 2048, 4096, 8192, 16384), 1024, log=True, integer=True),
        ),
    ),
    # The end of the lesson: the six ideas with the learner's answers (after the last step, whatever PAGES adds).
    PageInfo("summary", "pages/summary.py", None),
    PageInfo("formats", "pages/formats.py", None, (TextControl("x", "0.1", lambda t: try_parse_exact(t) is not None),)),
    PageInfo(
        "blocks",
        "pages/blocks.py",
        None,
        (
            NumberControl("n", (16, 32), 32, integer=True),
            NumberControl("grad", log_stops(-9, -1), 1e-6, log=True),
            # how far the one outlier stands above the block's other values: 2**outlier times their largest
            NumberControl("outlier", tuple(i / 4 for i in range(0, 65)), 0.0),
            *measured_controls(),
            RECIPE,
        ),
    ),
    PageInfo(
        "low_bits",
        "pages/low_bits.py",
        None,
        (
            # where the value lies between E2M1's 1 and 1.5 (lensa.lessons.low_bits.rounding_view)
            NumberControl("position", tuple(i / 20 for i in range(21)), 0.25),
            # how far the block's outlier stands above its other values: 2**outlier times their largest
            NumberControl("outlier", tuple(i / 2 for i in range(0, 21)), 5.0),
            ChoiceControl("arm", tuple(TRAINING_RECIPES), "nvfp4_recipe"),
        ),
    ),
    PageInfo(
        "lab",
        "pages/lab.py",
        None,
        (
            ChoiceControl("device", ("auto", "cpu", "cuda"), "auto"),
            NumberControl("width", (64, 128, 256, 512, 1024, 2048, 4096), 512, log=True, integer=True),
            NumberControl("depth", (1, 2, 3, 4, 5, 6), 3, integer=True),
            NumberControl("batch", (64, 128, 256, 512, 1024, 2048, 4096, 8192), 1024, log=True, integer=True),
            NumberControl("steps", (10, 20, 30, 60, 100, 200, 300), 60, log=True, integer=True),
            NumberControl("lr", (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1), 1e-3, log=True),
            NumberControl("trace_k", tuple(range(8, 41, 2)), 16, integer=True),
            NumberControl("trace_spike", tuple(range(25)), 12, integer=True),
            NumberControl("trace_factor", (1e2, 1e3, 1e4, 1e5, 1e6, 1e8), 1e4, log=True),
            NumberControl("trace_growth", (1, 2, 3, 4, 5, 10), 3, integer=True),
            # The comparison of the recipes below 16 bits: which of them (lensa.ui.live_view.RECIPE_GROUPS).
            ChoiceControl("recipes", ("all", "fp8", "fp4"), "all"),
        ),
    ),
    # ?term=subnormal opens the glossary at that entry ("all": the whole list, no entry picked).
    PageInfo("glossary", "pages/glossary.py", None, (ChoiceControl("term", ("all", *TERM_KEYS), "all"),)),
)

PAGES_BY_KEY = {p.key: p for p in PAGES}
STEPS = tuple(p for p in PAGES if p.step is not None)
STEP_COUNT = len(STEPS)  # the N of "step n of N" and the count of steps the text says
# The lesson in reading order, the previous and next links of its footers: the overview, every step, the summary.
LESSON = (PAGES_BY_KEY["overview"], *STEPS, PAGES_BY_KEY["summary"])
# Our navigation: the lesson first, then the other pages in the order of PAGES (the same order for the shipped list).
NAVIGATION = (*LESSON, *(p for p in PAGES if p not in LESSON))


def pages_with(control: str, pages: tuple[PageInfo, ...] | None = None) -> tuple[PageInfo, ...]:
    """The pages (of ``pages``, else :data:`PAGES`) that own a control named ``control``, in navigation order.

    ``pages_with("data")`` are the pages that can show a recorded run; ``pages_with("also")`` the steps
    that can show the narrower formats.
    """
    return tuple(p for p in (PAGES if pages is None else pages) if any(c.name == control for c in p.controls))


def _check(pages: tuple[PageInfo, ...]) -> None:
    """The list's own rules: unique keys and files, steps numbered 1..N in navigation order."""
    keys, files = [p.key for p in pages], [p.file for p in pages]
    if len(set(keys)) != len(keys) or len(set(files)) != len(files):
        raise ValueError(f"site.PAGES: a key or a file twice in {keys}")
    numbers = [p.step for p in pages if p.step is not None]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(f"site.PAGES: the steps must be numbered 1 to {len(numbers)} in order, not {numbers}")


_check(PAGES)
