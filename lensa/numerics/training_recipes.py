"""Training below 16 bits, as data: which tensor of each of a linear layer's three products a recipe quantizes, how.

A linear layer ``y = x @ w.T + b`` runs three matrix products a step (``x`` is (M, K), ``w`` is (N, K)):

- *fprop*: ``y = x @ w.T``, summed over K;
- *dgrad*: ``dx = dy @ w``, summed over N (not run for a layer whose input needs no gradient, the first one);
- *wgrad*: ``dw = dy.T @ x``, summed over M.

A :class:`TrainingRecipe` says, for the three tensors the products read (the layer's input ``x``, its weight ``w``,
the gradient of its output ``dy``), which block recipe of :mod:`lensa.numerics.blockscale` stores it (an *operand
recipe*: a key of :data:`OPERAND_RECIPES`, ``"bf16"`` for a plain BF16 copy, or None for FP32 as it is), how it rounds
(``"nearest"``, ties to even, or ``"stochastic"``), whether the two inputs of the wgrad product are first rotated
by the 16-point Hadamard transform (:func:`hadamard_matrix`), whether the weight takes square blocks (16×16 for
NVFP4: the weight and its transpose are then stored alike, so fprop and dgrad read the same numbers), how a
per-tensor FP8 scale is found (``"current"``: from the tensor itself; ``"delayed"``: from the largest amax of the
last ``amax_history`` steps, as Transformer Engine's ``DelayedScaling``,
:func:`lensa.numerics.blockscale.delayed_scales`), and how many of the model's last linear layers stay in BF16.

Each product reads each of its two tensors with the blocks running along the axis it sums over (K, N or M), as
the hardware's block-scaled products do; a tensor read along two different axes is quantized twice, each time
from its FP32 values (Transformer Engine's rowwise and columnwise copies), except where the two copies are the same
numbers: a per-tensor scale, or square blocks, with the same rounding draw (:func:`passes` says which).

:data:`TRAINING_RECIPES` holds the lab's recipes. Nothing here imports torch: :mod:`lensa.live.lowp` trains with
these recipes, and the lab's clock (:mod:`lensa.live.config`) costs them from :func:`passes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from lensa.numerics.blockscale import RECIPES, Recipe

Rounding = Literal["nearest", "stochastic"]
Scaling = Literal["current", "delayed"]
ROUNDINGS: tuple[Rounding, ...] = ("nearest", "stochastic")
Role = Literal["input", "weight", "grad"]
ROLES: tuple[Role, ...] = ("input", "weight", "grad")

BF16 = "bf16"
"""The operand recipe of a layer kept in BF16: each operand rounded to BF16 (nearest, ties to even)."""

FP8_E5M2_TENSOR = Recipe("fp8_e5m2_tensor", "FP8 E5M2 per tensor", "fp8_e5m2", None, "fp32", "amax")
"""Transformer Engine's ``Format.HYBRID`` stores gradients in E5M2 (and the input and weight in E4M3); its
``DelayedScaling`` and ``Float8CurrentScaling`` default to it."""

HADAMARD_SIZE = 16
HADAMARD_SIGNS: tuple[int, ...] = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)
"""The rotation's sign vector: Transformer Engine's for NVFP4's weight-gradient inputs (``get_wgrad_sign_vector`` in
``transformer_engine/pytorch/custom_recipes/quantization_nvfp4.py`` of TE v2.15, the version cited; the same vector is
in ``quantization_ref_nvfp4.py`` from v2.16 and in ``reference_nvfp4.py`` after it)."""
DRAW_HASH = (0x21F0AAAD, 0x735A2D97)
"""Stochastic rounding's draws: the two multipliers of lowbias32 as Chris Wellons' hash-prospector improved it
(``x ^= x >> 16; x *= A; x ^= x >> 15; x *= B; x ^= x >> 15``, a bijection of 32-bit integers; both below 2**31,
so a product with a 32-bit value fits an int64, which torch computes it in). A quantization's draw for the value
at flat place ``i`` is the top 24 bits of ``mix(mix(i ^ k0) ^ k1)`` times 2**-24, its two keys drawn from the
seeded generator (:mod:`lensa.live.lowp`)."""


def square(recipe: Recipe) -> Recipe:
    """``recipe`` with square blocks: a row block of n values becomes n × n (NVFP4's 1×16 becomes 16×16)."""
    if recipe.block is None or recipe.block[1] is None:
        return recipe
    n = recipe.block[1]
    if recipe.block == (n, n):
        return recipe
    return replace(recipe, key=f"{recipe.key}_{n}x{n}", label=f"{recipe.label}, {n}×{n} blocks", block=(n, n))


OPERAND_RECIPES: dict[str, Recipe] = {**RECIPES, FP8_E5M2_TENSOR.key: FP8_E5M2_TENSOR}
OPERAND_RECIPES.update({square(r).key: square(r) for r in RECIPES.values() if square(r) is not r})


def operand_recipe(key: str | Recipe) -> Recipe:
    """Look an operand recipe up by key (:data:`OPERAND_RECIPES`); a Recipe passes through."""
    if isinstance(key, Recipe):
        return key
    try:
        return OPERAND_RECIPES[key]
    except KeyError:
        raise ValueError(f"unknown operand recipe {key!r}; known: {', '.join(OPERAND_RECIPES)}, {BF16}") from None


@dataclass(frozen=True)
class TrainingRecipe:
    """How a recipe trains a linear layer: each tensor's operand recipe and rounding, the rotation, the scaling.

    ``input``, ``weight``, ``grad``: a key of :data:`OPERAND_RECIPES` (or a Recipe), :data:`BF16`, or None (FP32,
    not quantized). ``*_rounding``: ``"nearest"`` or ``"stochastic"``. ``hadamard``: the wgrad product's two
    inputs (``x`` and ``dy``, along M) rotated first. ``weight_2d``: the weight's recipe with square blocks
    (:func:`square`). ``scaling``: ``"delayed"`` gives every per-tensor operand TE's delayed scale (history of
    ``amax_history`` steps, ``margin``); block recipes always scale from the block itself. ``keep_bf16``: this
    many of the model's last linear layers stay in BF16.
    """

    key: str
    label: str
    input: str | Recipe | None
    weight: str | Recipe | None
    grad: str | Recipe | None
    input_rounding: Rounding = "nearest"
    weight_rounding: Rounding = "nearest"
    grad_rounding: Rounding = "nearest"
    hadamard: bool = False
    weight_2d: bool = False
    scaling: Scaling = "current"
    amax_history: int = 1024
    margin: int = 0
    keep_bf16: int = 0

    def __post_init__(self) -> None:
        for role in ROLES:
            spec = getattr(self, role)
            if spec is not None and spec != BF16:
                operand_recipe(spec)
            rounding = getattr(self, f"{role}_rounding")
            if rounding not in ROUNDINGS:
                raise ValueError(f"{role}_rounding must be one of {ROUNDINGS}, not {rounding!r}")
        if self.scaling not in ("current", "delayed"):
            raise ValueError(f"scaling must be 'current' or 'delayed', not {self.scaling!r}")
        if self.scaling == "delayed" and any(
            (r := self.operand(role)) is not None and r.block is not None for role in ROLES
        ):
            raise ValueError("delayed scaling is for per-tensor recipes only")
        if self.scaling == "delayed" and self.hadamard:
            raise ValueError("delayed scaling keeps one scale per tensor: it does not go with the rotation")
        if isinstance(self.amax_history, bool) or not isinstance(self.amax_history, int) or self.amax_history < 1:
            raise ValueError(f"amax_history must be a whole number of steps >= 1, not {self.amax_history!r}")
        if isinstance(self.keep_bf16, bool) or not isinstance(self.keep_bf16, int) or self.keep_bf16 < 0:
            raise ValueError(f"keep_bf16 must be a whole number of layers >= 0, not {self.keep_bf16!r}")

    def operand(self, role: Role) -> Recipe | None:
        """The block recipe that stores ``role`` (None: FP32 or BF16, see :meth:`is_bf16`); the weight's is
        squared with ``weight_2d``."""
        spec = getattr(self, role)
        if spec is None or spec == BF16:
            return None
        r = operand_recipe(spec)
        return square(r) if role == "weight" and self.weight_2d else r

    def is_bf16(self, role: Role) -> bool:
        return bool(getattr(self, role) == BF16)

    def rounding(self, role: Role) -> Rounding:
        value: Rounding = getattr(self, f"{role}_rounding")
        return value


def element_of(key: str) -> str:
    """The element format that draws an arm: ``key`` itself for ``"fp32"``, ``"fp16"`` and ``"bf16"``; for a
    recipe of :data:`TRAINING_RECIPES`, its input's element format (a key of :data:`lensa.numerics.formats.FORMATS`)."""
    recipe = TRAINING_RECIPES.get(key)
    if recipe is None:
        return key
    r = recipe.operand("input") or recipe.operand("weight")
    return r.element if r is not None else BF16


def bf16_layer(recipe: TrainingRecipe) -> TrainingRecipe:
    """What a layer kept in BF16 runs under ``recipe``: every operand in BF16, rounded to nearest."""
    return replace(
        recipe,
        key=f"{recipe.key}_bf16",
        input=BF16,
        weight=BF16,
        grad=BF16,
        input_rounding="nearest",
        weight_rounding="nearest",
        grad_rounding="nearest",
        hadamard=False,
        weight_2d=False,
        scaling="current",
        keep_bf16=0,
    )


def _all(key: str, label: str, operand: str, **options: object) -> TrainingRecipe:
    return TrainingRecipe(key, label, operand, operand, operand, **options)  # type: ignore[arg-type]  # options are TrainingRecipe's own fields


TRAINING_RECIPES: dict[str, TrainingRecipe] = {
    r.key: r
    for r in (
        TrainingRecipe(
            "fp8_delayed",
            "FP8 per tensor, delayed scaling",
            "fp8_tensor",
            "fp8_tensor",
            FP8_E5M2_TENSOR.key,
            scaling="delayed",
        ),
        TrainingRecipe(
            "fp8_current", "FP8 per tensor, current scaling", "fp8_tensor", "fp8_tensor", FP8_E5M2_TENSOR.key
        ),
        TrainingRecipe(
            "fp8_blockwise", "FP8 1×128 tiles, 128×128 weight blocks", "fp8_1x128", "fp8_128x128", "fp8_1x128"
        ),
        _all("fp8_128x128", "FP8 128×128 blocks, gradients too", "fp8_128x128"),
        _all("mxfp8", "MXFP8 E4M3", "mxfp8_e4m3"),
        _all("mxfp8_ceil", "MXFP8 E4M3, scale rounded up", "mxfp8_e4m3_ceil"),
        _all("mxfp4", "MXFP4 E2M1", "mxfp4_e2m1"),
        _all("nvfp4", "NVFP4, nearest", "nvfp4"),
        _all("nvfp4_sr", "NVFP4, stochastic rounding of gradients", "nvfp4", grad_rounding="stochastic"),
        _all("nvfp4_rht", "NVFP4, Hadamard rotation of the wgrad inputs", "nvfp4", hadamard=True),
        _all("nvfp4_2d", "NVFP4, 16×16 weight blocks", "nvfp4", weight_2d=True),
        _all(
            "nvfp4_recipe",
            "NVFP4 as NVIDIA trains it",
            "nvfp4",
            grad_rounding="stochastic",
            hadamard=True,
            weight_2d=True,
            keep_bf16=1,
        ),
    )
}
"""The lab's recipes below 16 bits.

``fp8_delayed`` and ``fp8_current``: Transformer Engine's ``DelayedScaling`` (its defaults: ``Format.HYBRID``, a
1024-step amax history, ``"max"``, margin 0) and ``Float8CurrentScaling`` (``Format.HYBRID``). ``fp8_blockwise``:
DeepSeek-V3's (arXiv:2412.19437): activations and gradients in 1×128 tiles, weights in 128×128 blocks, E4M3 and
FP32 scales throughout (TE's ``Float8BlockScaling`` rounds those scales to powers of two by default).
``fp8_128x128``: 128×128 blocks on every operand, a harsher cousin of the variant DeepSeek-V3 reports diverging (its
appendix B.2 quantized block-wise only the tensors of the Dgrad product, the weight and the activation gradient, and
kept the activations in 1×128 tiles; here the activations and the Wgrad product's gradient are blocked too). ``mxfp8``,
``mxfp8_ceil``: E4M3 on every tensor with OCP's scale and with the scale rounded up (arXiv:2506.08027).
``mxfp4``: MXFP4 on every tensor. ``nvfp4`` and its ablations, then ``nvfp4_recipe``: NVIDIA's (arXiv:2509.25149;
TE's ``NVFP4BlockScaling``): 16×16 weight blocks, stochastic rounding on gradients only, the rotation on the wgrad
inputs, and the last linear layer in BF16. That layer is, on the reference transformer, the output head tied to the
embedding, which NVIDIA never quantizes; NVIDIA also keeps the linear layers of a few blocks in BF16 (arXiv:2509.25149,
section 4), a choice of the training framework (Megatron-LM's ``num_layers_at_end_in_bf16``), not of TE's recipe.
"""


# --- what a step quantizes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """One quantization of one tensor in a layer's step: which, for which products, along which axis, how many
    values, and how (``recipe`` None: a BF16 copy; ``rotated``: the Hadamard rotation first)."""

    role: Role
    products: tuple[str, ...]  # "fprop", "dgrad", "wgrad"
    axis: str  # the axis its blocks run along: "K", "N" or "M"
    values: int
    recipe: Recipe | None
    rounding: Rounding
    rotated: bool

    @property
    def down(self) -> bool:
        """Whether the blocks run down the tensor's first axis (the weight along N, the wgrad inputs along M)
        rather than along its last."""
        return self.axis == "M" or (self.role == "weight" and self.axis == "N")


def pass_class(p: Pass, delayed: bool = False) -> str:
    """What a pass costs depends on: its recipe (``bf16`` for a BF16 copy), rounding, rotation, direction, and
    whether a delayed scale is kept; the lab's clock times each class (:mod:`lensa.live.clock`)."""
    name = "bf16" if p.recipe is None else p.recipe.key
    tail = ("rot " if p.rotated else "") + ("down" if p.down else "along") + (" delayed" if delayed else "")
    return f"{name} {p.rounding} {tail}"


def layer_passes(recipe: TrainingRecipe, m: int, k: int, n: int, dgrad: bool = True) -> tuple[tuple[Pass, str], ...]:
    """:func:`passes` with each pass's :func:`pass_class`."""
    return tuple(
        (p, pass_class(p, recipe.scaling == "delayed" and p.recipe is not None and p.recipe.block is None))
        for p in passes(recipe, m, k, n, dgrad)
    )


def model_passes(recipe: TrainingRecipe, shapes: list[tuple[int, int, int, bool]]) -> tuple[tuple[Pass, str], ...]:
    """The passes of one step of a model whose linear layers have ``shapes`` ((m, k, n, dgrad) each, in order),
    the last ``recipe.keep_bf16`` of them in BF16."""
    out: list[tuple[Pass, str]] = []
    for i, (m, k, n, dgrad) in enumerate(shapes):
        layer_recipe = bf16_layer(recipe) if i >= len(shapes) - recipe.keep_bf16 else recipe
        out.extend(layer_passes(layer_recipe, m, k, n, dgrad))
    return tuple(out)


@dataclass(frozen=True)
class LayerShare:
    """What one tensor of one layer lost over the steps counted: ``values`` quantized, and the shares (0..1)
    ``flushed`` (of the values not 0, stored as 0) and ``saturated`` (of all, clamped to the element's largest)."""

    layer: str
    role: str
    values: int
    flushed: float
    saturated: float


def _same_both_ways(r: Recipe | None) -> bool:
    """A tensor stored alike whichever axis its blocks run along: a per-tensor scale, or square blocks."""
    return r is None or r.block is None or (r.block[0] is not None and r.block[0] == r.block[1])


def passes(recipe: TrainingRecipe, m: int, k: int, n: int, dgrad: bool = True) -> tuple[Pass, ...]:
    """The quantizations one training step of a linear layer makes under ``recipe`` (``x`` (m, k), ``w`` (n, k);
    ``dgrad`` False for a layer whose input needs no gradient). A tensor the recipe leaves in FP32 makes none.

    A tensor two products read along different axes is quantized once for both where :func:`_same_both_ways`
    (and, for a wgrad input, it is not rotated); otherwise once per product, each from its FP32 values.
    """
    out: list[Pass] = []

    def add(role: Role, values: int, uses: list[tuple[str, str, bool]]) -> None:
        spec = getattr(recipe, role)
        if spec is None:
            return
        r = recipe.operand(role)
        rounding: Rounding = "nearest" if recipe.is_bf16(role) else recipe.rounding(role)
        if len(uses) == 2 and _same_both_ways(r) and not (uses[0][2] or uses[1][2]):
            out.append(Pass(role, (uses[0][0], uses[1][0]), uses[0][1], values, r, rounding, False))
            return
        for product, axis, rotated in uses:
            out.append(Pass(role, (product,), axis, values, r, rounding, rotated))

    rotate = recipe.hadamard and not recipe.is_bf16("input")
    add("input", m * k, [("fprop", "K", False), ("wgrad", "M", rotate)])
    add("weight", n * k, [("fprop", "K", False), ("dgrad", "N", False)] if dgrad else [("fprop", "K", False)])
    grad_uses = [("dgrad", "N", False), ("wgrad", "M", rotate)] if dgrad else [("wgrad", "M", rotate)]
    add("grad", m * n, grad_uses)
    return tuple(out)


# --- what a run's losses say -------------------------------------------------------------------------------------

FINAL_SHARE = 0.1
"""An arm's final loss is the mean training loss of its last tenth of steps (one at least): a single step's loss
moves with its batch."""


def final_loss(losses: Sequence[float] | NDArray[np.floating[Any]]) -> float:
    """The mean of the last :data:`FINAL_SHARE` of ``losses`` (NaN when one of them is not finite, or none)."""
    a = np.asarray(losses, np.float64).reshape(-1)
    if not a.size:
        return math.nan
    tail = a[-max(1, round(FINAL_SHARE * a.size)) :]
    return float(tail.mean()) if np.isfinite(tail).all() else math.nan


def diverged(losses: Sequence[float] | NDArray[np.floating[Any]]) -> bool:
    """Whether a run failed to train: a loss that is not finite, or a final loss (:func:`final_loss`) above the
    first step's (the loss the initial weights gave)."""
    a = np.asarray(losses, np.float64).reshape(-1)
    if not a.size or not np.isfinite(a).all():
        return True
    return bool(final_loss(a) > a[0])


# --- the rotation -----------------------------------------------------------------------------------------------


def hadamard_matrix() -> NDArray[np.float64]:
    """The 16-point rotation R = diag(:data:`HADAMARD_SIGNS`) · H16 / 4, H16 Sylvester's Hadamard matrix.

    A row of 16 values ``v`` rotates to ``v @ R`` (as Transformer Engine applies it); R is orthogonal (R · Rᵀ = I,
    its entries ±1/4 exactly), so ``(v @ R) @ R.T`` gives ``v`` back, and a product summed over blocks of 16 is
    unchanged when both of its inputs are rotated: (a R)·(b R) = a·b.
    """
    h = np.ones((1, 1))
    while h.shape[0] < HADAMARD_SIZE:
        h = np.block([[h, h], [h, -h]])
    out: NDArray[np.float64] = np.diag(np.array(HADAMARD_SIGNS, np.float64)) @ h / 4.0
    return out
