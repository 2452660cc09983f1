"""Training below 16 bits, emulated in torch: block-scaled FP8, MX and NVFP4 matrix products on any device.

    import lensa.live.lowp as lowp
    model = lowp.quantize_model(model, "nvfp4_recipe")      # or "mxfp8", "fp8_delayed", ... (TRAINING_RECIPES)
    # ... train as usual: each nn.Linear now quantizes the operands of its three products

:func:`fake_quantize` stores a tensor as a recipe of :data:`lensa.numerics.blockscale.RECIPES` does and gives the values
it stands for. With ``rounding="nearest"`` it is :func:`lensa.numerics.blockscale.quantize`, bit for bit, for every
recipe, block shape and tensor shape (``dtype=torch.float64`` gives its float64 values; the default float32 result is
those values rounded once to FP32, the numbers an emulated FP32 product reads): the same scale rules, computed in
the same FP32 operations, and the same rounding (ties to even, saturation at the element's largest value).

``rounding="stochastic"`` rounds a scaled value ``y`` between its two neighbours on the element's grid, ``lo`` and
``hi = lo + step``, up with probability ``(y - lo) / step``: its expected value is ``y`` (unbiased) wherever that
probability is a multiple of 2**-24, which it is for every ``y`` at least 2**-24 steps above ``lo`` (the uniform
draws are multiples of 2**-24); nearer ``lo`` it rounds up with probability 2**-24, slightly more often than it
should. A value past the element's largest is clamped to it, not rounded (counted as saturated only past what
rounding to nearest would keep, as :mod:`lensa.numerics.blockscale` counts). The draws are a hash of each value's place
in the tensor under two 32-bit keys that each quantization takes from the seeded ``torch.Generator``
(:data:`lensa.numerics.training_recipes.DRAW_HASH`: lowbias32 twice, the top 24 bits over 2**24), so they are the same
numbers on every device and path, and a quantization moves the generator on by one draw whatever the tensor's size.

``hadamard=True`` rotates each 16 values along the last axis by R = diag(s) · H16 / 4 (Sylvester's Hadamard
matrix, the sign vector ``s`` = :data:`lensa.numerics.training_recipes.HADAMARD_SIGNS`, Transformer Engine's),
quantizes, and rotates back by Rᵀ; a last axis that is not a multiple of 16 is padded with zeros for the rotation. R is
orthogonal, so the rotation changes a product of two rotated operands by float32 rounding only: :func:`rotate` then
``rotate(..., inverse=True)`` gives each value back within :data:`ROTATION_ERROR` times its 16-block's amax.

:func:`quantize_model` makes a model's ``nn.Linear`` layers run :class:`LinearFunction`: the three products of a
step (fprop ``x @ w.T``, dgrad ``dy @ w``, wgrad ``dy.T @ x``) each read operands quantized per a
:class:`lensa.numerics.training_recipes.TrainingRecipe`, blocks along the axis summed over, and are computed in FP32
(autocast is off inside them), as torchao's emulated kernels and Transformer Engine's reference GEMMs do. The bias and
its gradient stay FP32. What each layer and tensor lost is counted at the steps asked for (:func:`set_counting`,
:func:`layer_shares`).

NVFP4 here is :mod:`lensa.numerics.blockscale`'s rule (torchao's: ``nvfp4_tensor``), which differs from Transformer
Engine's reference quantizer (``NVFP4QuantizerRef`` in
``transformer_engine/pytorch/custom_recipes/quantization_nvfp4.py`` of TE v2.15; ``quantization_ref_nvfp4.py`` from
v2.16, ``reference_nvfp4.py`` after it) in four places: the block scale is clamped below at E4M3's smallest normal 2**-6
(TE's only at 448 above, so a block far below the tensor's amax there gets a subnormal scale or 0, and its values
flush); the tensor scale is ``amax / (448 * 6)`` (TE's is the reciprocal of ``448 * 6 / amax``, which can differ in the
last bit); values are divided by ``tensor scale * block scale`` (TE multiplies by the reciprocal of that product); and
the value a code stands for is ``code * tensor scale
* block scale`` rounded once to FP32 (TE's multiplies by its two scales in turn, rounding twice). Only the first
changes which codes are stored; the last moves most values of a tensor by one or two units in FP32's last place.
``tests/test_lowp.py`` measures all four against TE's formula written out.

On the CPU, where numba is installed (``requirements.txt`` has it; ``LENSA_NUMBA=0`` switches it off), a float32
tensor is quantized by :mod:`lensa.lowp_kernels`' compiled kernel: the block maxima, the scales and the rounding in
two passes over the tensor instead of about ten torch operations, three to five times faster on a 512 × 256 tensor
(docs/performance.md), and the same numbers bit for bit, stochastic rounding's included (``tests/test_lowp.py``
compares the two paths on every recipe). Elsewhere, and for ``dtype=torch.float64``, plain torch operations do it.

Nothing here has run on CUDA (no GPU was lent while it was written); every operation of the torch path is a plain
torch operation on the tensor's own device, with a ``torch.Generator`` on that device for the stochastic draws'
keys.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, TypeVar, cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lensa.numerics import blockscale_dispatch
from lensa.numerics.blockscale import _RULE_CODES, Recipe, _tie_goes_up, get_recipe
from lensa.numerics.blockscale_dispatch import attempt
from lensa.numerics.formats import FORMATS, FloatFormat
from lensa.numerics.training_recipes import (
    BF16,
    DRAW_HASH,
    HADAMARD_SIZE,
    ROLES,
    TRAINING_RECIPES,
    LayerShare,
    Pass,
    Role,
    Rounding,
    TrainingRecipe,
    bf16_layer,
    hadamard_matrix,
    passes,
)

ROTATION_ERROR = 2.0**-20
""":func:`rotate` then its inverse gives each value back within this times the amax of its block of 16."""

_NVFP4_TENSOR_DIVISOR = 448.0 * 6.0
T = TypeVar("T")
_SMALLEST_SCALE = 2.0**-149  # as lensa.numerics.blockscale: where an FP32 scale stops instead of underflowing to 0
_E4M3 = FORMATS["fp8_e4m3"]
_NATIVE = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


# --- one tensor -------------------------------------------------------------------------------------------------


@dataclass
class Counts:
    """What quantizing lost, summed over the quantizations counted: ``values`` quantized, ``nonzero`` of them not
    0, ``flushed`` (not 0, stored as 0) and ``saturated`` (clamped to the element's largest value)."""

    values: int = 0
    nonzero: int = 0
    flushed: int = 0
    saturated: int = 0

    def add(self, other: Counts) -> None:
        self.values += other.values
        self.nonzero += other.nonzero
        self.flushed += other.flushed
        self.saturated += other.saturated


def _rows_shape(shape: tuple[int, ...] | torch.Size) -> tuple[int, int, int]:
    rows = 1 if len(shape) < 2 else shape[-2]
    cols = 1 if len(shape) == 0 else shape[-1]
    lead = math.prod(shape[:-2]) if len(shape) > 2 else 1
    return lead, rows, cols


def _blocked(x: torch.Tensor, block: tuple[int | None, int | None] | None) -> tuple[torch.Tensor, tuple[Any, ...]]:
    """``x`` as (matrices, row blocks, rows per block, column blocks, values per column block), zero-padded to whole
    blocks (zeros leave a block's amax alone), and how to undo it; as :func:`lensa.numerics.blockscale._blocked`."""
    shape = tuple(x.shape)
    if block is None:
        return x.reshape(1, 1, 1, 1, -1), (shape, None)
    lead, rows, cols = _rows_shape(shape)
    br = rows if block[0] is None or block[0] > rows else block[0]
    bc = cols if block[1] is None or block[1] > cols else block[1]
    br, bc = max(br, 1), max(bc, 1)
    m = x.reshape(lead, rows, cols)
    pr, pc = (-rows) % br, (-cols) % bc
    if pr or pc:
        m = F.pad(m, (0, pc, 0, pr))
    return m.view(lead, (rows + pr) // br, br, (cols + pc) // bc, bc), (shape, (lead, rows, cols))


def _unblocked(b: torch.Tensor, how: tuple[Any, ...]) -> torch.Tensor:
    shape, dims = how
    if dims is None:
        return b.reshape(shape)
    lead, rows, cols = dims
    m = b.reshape(lead, b.shape[1] * b.shape[2], b.shape[3] * b.shape[4])
    if m.shape[1] != rows or m.shape[2] != cols:
        m = m[:, :rows, :cols]
    return m.reshape(shape)


def _block_amax(a: torch.Tensor) -> torch.Tensor:
    """Each block's largest value of ``a`` (magnitudes, blocked as :func:`_blocked` lays them out), shaped
    (matrices, row blocks, 1, column blocks, 1); NaN where a block holds a NaN (max pooling and ``amax`` both
    propagate it). Blocks of 16 along a row take torch's max pooling, several times faster than ``amax`` over a
    last axis that short; a 16×16 block, that pooling and then the maximum down its rows."""
    lead, rb, br, cb, bc = a.shape
    if bc != 16:
        return a.amax(dim=(2, 4), keepdim=True)
    rows = F.max_pool1d(a.reshape(lead * rb * br, 1, cb * bc), bc).reshape(lead, rb, br, cb, 1)
    return rows if br == 1 else rows.amax(dim=2, keepdim=True)


def _powers_of_two(e: torch.Tensor) -> torch.Tensor:
    """2**e in float32 for integer e in -127 ... 127, from the bits (2**-127, a subnormal, where (e + 127) << 23
    gives 0), as :func:`lensa.numerics.blockscale._powers_of_two`."""
    bits = torch.clamp_min((e + 127) << 23, 0x400000)
    return bits.view(torch.float32)


def _block_scales(r: Recipe, amax: torch.Tensor) -> torch.Tensor:
    """Each block's scale (what its values are divided by) from its amax (0 for a block with a NaN or an inf), as
    :func:`lensa.numerics.blockscale._block_scales` computes it, in the same float32 operations (an FP32 scale that
    would underflow to 0 stops at 2**-149, as there)."""
    f = r.element_format
    if r.rule == "amax":
        return torch.where(amax > 0, torch.clamp_min(amax / f.max, _SMALLEST_SCALE), torch.ones_like(amax))
    if r.rule == "nvfp4":
        top = amax.amax() if amax.numel() else amax.new_zeros(())
        ts = torch.where(top > 0, torch.clamp_min(top / _NVFP4_TENSOR_DIVISOR, _SMALLEST_SCALE), torch.ones_like(top))
        block = (amax / f.max) / ts
        block = torch.clamp(block, _E4M3.smallest_normal, _E4M3.max)
        block = block.to(torch.float8_e4m3fn).to(torch.float32)
        return torch.clamp_min(ts * block, _SMALLEST_SCALE)
    bits = amax.view(torch.int32)
    e = (bits >> 23) - (127 + f.emax)
    if r.rule == "mx_ceil":
        top_fraction = int(torch.tensor(f.max, dtype=torch.float32).view(torch.int32)) & 0x7FFFFF
        e = e + ((bits & 0x7FFFFF) > top_fraction).to(torch.int32)
    return _powers_of_two(torch.clamp_min(e, -127))


def _saturation(f: FloatFormat) -> tuple[float, bool]:
    """(threshold, inclusive): a scaled magnitude past it (at it, when inclusive) is counted as saturated, whatever
    the rounding: past the largest value by more than rounding to nearest absorbs (:mod:`lensa.numerics.blockscale`'s
    definition). Stochastic rounding clamps anything past the largest value, but counting the values a hair above
    it (a block's amax, when the block's scale was rounded down) would make it look worse than it is."""
    return f.overflow_threshold, _tie_goes_up(f)


def _to_grid(a: torch.Tensor, f: FloatFormat, draws: torch.Tensor | None) -> torch.Tensor:
    """Magnitudes ``a`` (float32, >= 0 or NaN, at most ``f.max``) rounded to ``f``'s grid, in place.

    Nearest (``draws`` None): ties to even, by :func:`lensa.numerics.formats.round_float32`'s magic-number addition
    (2**(b + 23 - m), b the binade, emin at least, added and taken away again: float32's own rounding does the work).
    Stochastic: ``a`` over its grid step ``u`` (a power of two, so exactly) is ``t``; the result is ``(floor(t) +
    (draw < t - floor(t))) * u``, with ``draws`` (:func:`_draws`, shaped as ``a``).
    """
    exp = torch.bitwise_and(a.view(torch.int32), 0x7F800000).clamp_min_((f.emin + 127) << 23)
    if draws is None:
        magic = exp.add_((23 - f.significand_bits) << 23).view(torch.float32)
        return a.add_(magic).sub_(magic)
    step = exp.sub_(f.significand_bits << 23).view(torch.float32)
    t = a.div_(step)
    low = torch.floor(t)
    return low.add_(draws.lt_(t.sub_(low))).mul_(step)


_MASK32 = 0xFFFFFFFF


def _mix(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """:func:`lensa.lowp_kernels._mix` (lowbias32, :data:`lensa.numerics.training_recipes.DRAW_HASH`) on int64 tensors
    holding uint32 values, in place (``t``: scratch of the same shape): a product of one with a multiplier below 2**31
    fits an int64, and its low 32 bits are uint32's."""
    x ^= torch.bitwise_right_shift(x, 16, out=t)
    x.mul_(DRAW_HASH[0]).bitwise_and_(_MASK32)
    x ^= torch.bitwise_right_shift(x, 15, out=t)
    x.mul_(DRAW_HASH[1]).bitwise_and_(_MASK32)
    x ^= torch.bitwise_right_shift(x, 15, out=t)
    return x


def _draws(index: torch.Tensor, keys: tuple[int, int]) -> torch.Tensor:
    """Stochastic rounding's uniform draws for the values at flat places ``index`` (int64): each the top 24 bits of
    ``mix(mix(i ^ k0) ^ k1)`` times 2**-24, a multiple of 2**-24 in [0, 1) as ``torch.rand`` gives; the numbers
    :func:`lensa.lowp_kernels.draw` gives, so the compiled and the torch path round alike."""
    x = index & _MASK32
    t = torch.empty_like(x)
    x ^= keys[0]
    _mix(x, t)
    x ^= keys[1]
    _mix(x, t)
    return x.bitwise_right_shift_(8).to(torch.float32).mul_(2.0**-24)


def draw_keys(generator: torch.Generator | None, device: torch.device) -> tuple[int, int]:
    """Two 32-bit keys for one quantization's stochastic draws, from ``generator`` (torch's default one on
    ``device`` when None): the generator moves on by one draw of two numbers, whatever the tensor's size."""
    k = torch.randint(0, 2**32, (2,), generator=generator, device=device, dtype=torch.int64).tolist()
    return int(k[0]), int(k[1])


def _kernels() -> ModuleType | None:
    """:mod:`lensa.lowp_kernels` where numba compiles here (:func:`lensa.numerics.blockscale_dispatch.available`:
    installed, not switched off with ``LENSA_NUMBA=0``, not given up after a failure); None: the torch path."""
    return _load_kernels() if blockscale_dispatch.available() else None


@functools.cache
def _load_kernels() -> ModuleType:
    from lensa import lowp_kernels

    return lowp_kernels


def _per_recipe(fn: Callable[[Recipe], T]) -> Callable[[Recipe], T]:
    """``fn`` remembered per Recipe object, looked up by its identity (a frozen dataclass's hash is worked out anew
    at every call, which costs a small layer's quantization more than the rest of the lookup); an entry names its
    recipe, so a new object that reuses an old one's identity gets its own answer."""
    memo: dict[int, tuple[Recipe, T]] = {}

    @functools.wraps(fn)
    def cached(r: Recipe) -> T:
        hit = memo.get(id(r))
        if hit is None or hit[0] is not r:
            if len(memo) > 256:
                memo.clear()
            hit = memo[id(r)] = (r, fn(r))
        return hit[1]

    return cached


@_per_recipe
def _mx_supported(r: Recipe) -> bool:
    """Whether ``r``'s own scale rule can be computed here: an MX element with its largest exponent below 1 cannot."""
    return r.rule in ("amax", "nvfp4") or r.element_format.emax >= 1


@_per_recipe
def _kernel_constants(r: Recipe) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``r``'s constants as :func:`lensa.lowp_kernels.quantize` reads them: (float32, uint32, int64) arrays, their
    places named by that module's ``F_*``, ``U_*``, ``I_*``."""
    k = _load_kernels()
    f = r.element_format
    threshold, inclusive = _saturation(f)
    f32 = np.zeros(5, np.float32)
    f32[[k.F_MAX_ELEM, k.F_E4M3_SMALLEST, k.F_E4M3_MAX, k.F_NVFP4_DIVISOR, k.F_THRESHOLD]] = [
        f.max,
        _E4M3.smallest_normal,
        _E4M3.max,
        _NVFP4_TENSOR_DIVISOR,
        threshold,
    ]
    u32 = np.zeros(6, np.uint32)
    u32[[k.U_FRAC_TOP, k.U_GRID_LOW, k.U_GRID_SHIFT, k.U_LOW, k.U_SHIFT, k.U_SIG_SHIFT]] = [
        int(np.float32(f.max).view(np.uint32)) & 0x7FFFFF,
        (_E4M3.emin + 127) << 23,  # E4M3's rounding: NVFP4's block scales
        (23 - _E4M3.significand_bits) << 23,
        (f.emin + 127) << 23,
        (23 - f.significand_bits) << 23,
        f.significand_bits << 23,
    ]
    i64 = np.zeros(3, np.int64)
    i64[[k.I_RULE, k.I_EMAX, k.I_INCLUSIVE]] = [_RULE_CODES[r.rule], f.emax, int(inclusive)]
    for a in (f32, u32, i64):
        a.setflags(write=False)
    return f32, u32, i64


def _quantize_compiled(
    k: ModuleType,
    x: torch.Tensor,
    r: Recipe,
    block: tuple[int | None, int | None] | None,
    keys: tuple[int, int] | None,
    counts: Counts | None,
    scale: torch.Tensor | None,
) -> tuple[torch.Tensor, float]:
    """:func:`_quantize` (float32 values, blocks ``block`` along the tensor's last two axes) by the compiled kernel:
    the same numbers, in two passes over the tensor instead of about ten torch operations, and with a few
    microseconds of Python around it (numpy's views, not torch's: the lab's layers are small)."""
    src = x.detach()
    if not src.is_contiguous():
        src = src.contiguous()
    shape = src.shape
    lead, rows, cols = _rows_shape(shape)
    values = src.numpy()
    if block is None:  # one block: the whole tensor, its matrices one under another
        x3 = values.reshape(1, lead * rows, cols)
        br, bc = lead * rows, cols
    else:
        x3 = values.reshape(lead, rows, cols)
        br = max(rows if block[0] is None or block[0] > rows else block[0], 1)
        bc = max(cols if block[1] is None or block[1] > cols else block[1], 1)
    out = np.empty(x3.shape, np.float32)
    f32, u32, i64 = _kernel_constants(r)
    given = math.nan if scale is None else float(scale)  # a float32's value, exactly
    k0, k1 = keys if keys is not None else (0, 0)
    got = np.zeros(3, np.int64) if counts is not None else None
    amax = k.quantize(x3, out, br, bc, f32, u32, i64, given, keys is not None, k0, k1, got)
    if counts is not None and got is not None:
        counts.values += src.numel()
        counts.saturated += int(got[0])
        counts.nonzero += int(got[1])
        counts.flushed += int(got[2])
    return torch.from_numpy(out.reshape(shape)), float(amax)


def _quantize(
    x: torch.Tensor,
    r: Recipe,
    rounding: Rounding = "nearest",
    generator: torch.Generator | None = None,
    counts: Counts | None = None,
    *,
    scale: torch.Tensor | None = None,
    wide: bool = False,
    down: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | float]:
    """``x`` (float32) stored under ``r`` with ``rounding``: (the values it stands for, the tensor's amax: a float
    where the compiled kernel made it, read on the CPU, else a tensor on ``x``'s device).

    Blocks along the last axis; with ``down``, along the one before (the recipe's block transposed: a 2-D
    tensor's columns, the numbers ``x.T`` would give with blocks along its rows, without the transposed copy).
    ``scale``: a per-tensor scale given from outside (delayed scaling, Transformer Engine's: values are multiplied
    by it and the elements by its float32 reciprocal); None computes each block's from the block. ``wide``: the
    values in float64 (element times scale, exactly), else float32. ``counts``: add what was flushed and
    saturated. A NaN or an inf in a block makes its scale, and so its every value, NaN (as
    :mod:`lensa.numerics.blockscale`).
    """
    f = r.element_format
    if x.numel() == 0:
        return x.to(torch.float64 if wide else torch.float32), x.new_zeros((), dtype=torch.float32)
    if scale is None and not _mx_supported(r):
        raise ValueError(f"{r.key}: an MX element format with its largest exponent below 1 is not supported here")
    block = None if scale is not None else r.block
    if down and block is not None:
        block = (block[1], block[0])
    keys = draw_keys(generator, x.device) if rounding == "stochastic" else None
    # The kernel reads a plain CPU tensor's memory; a tensor subclass (a DTensor's shard, say) takes torch's path.
    plain = type(x) is torch.Tensor or type(x) is nn.Parameter
    if plain and not wide and x.is_cpu and x.dtype == torch.float32 and (kernels := _kernels()) is not None:
        done, got = attempt(
            lambda: _quantize_compiled(kernels, x, r, block, keys, counts, scale),
            "the quantization below 16 bits, torch's operations run instead",
        )
        if done:
            return cast(tuple[torch.Tensor, float], got)
    b, how = _blocked(x, block)
    a = b.abs()
    amax = _block_amax(a)
    bad = ~torch.isfinite(amax)
    amax = amax.masked_fill(bad, 0.0)
    tensor_amax = amax.amax()
    if scale is None:
        s = _block_scales(r, amax).masked_fill(bad, math.nan)
        a.div_(s)
    else:
        s = torch.reciprocal(scale).reshape(1, 1, 1, 1, 1).masked_fill(bad, math.nan)  # TE's scale_inv
        a.mul_(scale)
    if counts is not None:
        threshold, inclusive = _saturation(f)
        counts.values += x.numel()
        counts.saturated += int(((a >= threshold) if inclusive else (a > threshold)).sum())
    # Saturation: a value past the largest one is stored as it. (Most blocks' scales bring their amax to at most the
    # largest value, or a hair above it that rounding to nearest brings back down; not OCP's MX scale rounded down,
    # a given scale, or a scale that stopped at 2**-149 instead of underflowing.)
    a.clamp_max_(f.max)
    draws = None
    if keys is not None:
        index = torch.arange(x.numel(), dtype=torch.int64, device=x.device).view(x.shape)
        draws = _draws(_blocked(index, block)[0], keys)
    e = _to_grid(a, f, draws)
    if counts is not None:
        nonzero = b != 0
        counts.nonzero += int(nonzero.sum())
        counts.flushed += int((nonzero & (e == 0)).sum())
    stored = e.double().mul_(s.double()) if wide else e.mul_(s)
    return _unblocked(stored.copysign_(b), how), tensor_amax


def rotate(t: torch.Tensor, inverse: bool = False, *, down: bool = False) -> torch.Tensor:
    """Each 16 values along the last axis times R (:func:`lensa.numerics.training_recipes.hadamard_matrix`), or times Rᵀ
    with ``inverse``, in float32; a last axis that is not a multiple of 16 is padded with zeros first and the result has
    the padded length (cut it back after the inverse). ``down``: along the first axis of a 2-D tensor instead."""
    x = t.to(torch.float32)
    if x.dim() == 0:
        x = x.reshape(1)
    r = _rotation(x.device)
    r = r.T if inverse else r
    if down:
        pad = (-x.shape[0]) % HADAMARD_SIZE
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        blocks = x.reshape(-1, HADAMARD_SIZE, x.shape[-1])
        return torch.matmul(r.T, blocks).reshape(x.shape)
    pad = (-x.shape[-1]) % HADAMARD_SIZE
    if pad:
        x = F.pad(x, (0, pad))
    return (x.reshape(-1, HADAMARD_SIZE) @ r).reshape(x.shape)


_ROTATIONS: dict[torch.device, torch.Tensor] = {}


def _rotation(device: torch.device) -> torch.Tensor:
    if device not in _ROTATIONS:
        _ROTATIONS[device] = torch.tensor(hadamard_matrix(), dtype=torch.float32, device=device)
    return _ROTATIONS[device]


def fake_quantize(
    t: torch.Tensor,
    recipe: str | Recipe,
    *,
    rounding: Rounding = "nearest",
    generator: torch.Generator | None = None,
    hadamard: bool = False,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The values ``recipe`` (a key of :data:`lensa.numerics.blockscale.RECIPES`, or a Recipe) stores for ``t``, blocks
    along the last axis, in float32 (``dtype=torch.float64``: exactly, as :func:`lensa.numerics.blockscale.quantize`
    gives them).

    ``t`` is read as float32 (a float64 tensor is rounded to float32 first, as :mod:`lensa.numerics.blockscale` does).
    ``rounding``: ``"nearest"`` (ties to even) or ``"stochastic"`` (draws from ``generator``, or torch's default
    one on the device). ``hadamard``: rotate each 16 values of the last axis first and back after (see the module's
    docstring); the result then is not what the recipe stores, but what it stands for once rotated back.
    """
    r = get_recipe(recipe)
    if rounding not in ("nearest", "stochastic"):
        raise ValueError(f"rounding must be 'nearest' or 'stochastic', not {rounding!r}")
    if dtype not in (None, torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, not {dtype}")
    wide = dtype == torch.float64
    x = t.detach().to(torch.float32)
    if not hadamard:
        return _quantize(x, r, rounding, generator, wide=wide)[0]
    n = x.shape[-1] if x.dim() else 1
    q = _quantize(rotate(x), r, rounding, generator)[0]
    back = rotate(q, inverse=True)[..., :n]
    return back.reshape(t.shape).to(torch.float64 if wide else torch.float32)


# --- delayed scaling --------------------------------------------------------------------------------------------


class DelayedScale:
    """One tensor's delayed scale, as Transformer Engine's ``DelayedScaling`` keeps it (``amax_compute_algo="max"``).

    The scale a quantization uses is ``(fmt_max * 2**-margin) / max(history)`` in FP32, the history holding the
    amaxes of the last ``history`` quantizations before it; 1.0 before any, unchanged while that maximum is 0 or
    not finite, and FP32's largest finite value where the quotient overflows (TE's ``delayed_scaling.cu``). The
    same numbers as :func:`lensa.numerics.blockscale.delayed_scales` on the amaxes recorded (:attr:`amaxes`), kept on
    the tensor's device (no read back per step).
    """

    def __init__(self, fmt: FloatFormat, history: int, margin: int) -> None:
        self.history = history
        self.scaled_max = torch.tensor(fmt.max, dtype=torch.float32) * torch.tensor(
            2.0 ** -float(margin), dtype=torch.float32
        )
        self.window: torch.Tensor | None = None
        self.scale: torch.Tensor | None = None
        self.seen = 0
        self.amaxes: list[torch.Tensor] = []
        self.keep_amaxes = False

    def current(self, device: torch.device) -> torch.Tensor:
        if self.scale is None or self.window is None:
            self.scale = torch.ones((), dtype=torch.float32, device=device)
            self.window = torch.zeros(self.history, dtype=torch.float32, device=device)
            self.scaled_max = self.scaled_max.to(device)
        return self.scale

    def record(self, amax: torch.Tensor | float) -> None:
        """Add a quantization's amax (a NaN one, from a tensor holding NaN, is left out of the window)."""
        assert self.window is not None and self.scale is not None
        if not isinstance(amax, torch.Tensor):  # the compiled path's, read on the CPU
            amax = torch.tensor(amax, dtype=torch.float32, device=self.window.device)
        if self.keep_amaxes:
            self.amaxes.append(amax.detach().clone())
        slot = self.seen % self.history
        self.window[slot] = torch.where(torch.isnan(amax), self.window[slot], amax)
        self.seen += 1
        top = self.window.amax()
        ok = torch.isfinite(top) & (top > 0)
        # An amax so small that the quotient overflows gets FP32's largest finite scale, as TE's kernel gives it.
        scale = torch.clamp(self.scaled_max / top, max=torch.finfo(torch.float32).max)
        self.scale = torch.where(ok, scale, self.scale)


# --- one layer --------------------------------------------------------------------------------------------------


@dataclass
class LayerState:
    """What a quantized layer keeps: its name, its recipe, its passes' plan, the delayed scales, the counts."""

    name: str
    recipe: TrainingRecipe
    model_state: ModelState
    delayed: dict[Role, DelayedScale] = field(default_factory=dict)
    counts: dict[Role, Counts] = field(default_factory=dict)
    enabled: bool = True
    plans: dict[tuple[int, int, int, bool], dict[tuple[Role, str], Pass]] = field(default_factory=dict)

    def reset(self) -> None:
        self.delayed.clear()
        self.counts.clear()


@dataclass
class ModelState:
    """What :func:`quantize_model` keeps for the whole model: the seed and generators of the stochastic draws, and
    whether the next step's losses are counted."""

    seed: int
    generators: dict[torch.device, torch.Generator] = field(default_factory=dict)
    counting: bool = False

    def generator(self, device: torch.device) -> torch.Generator:
        if device not in self.generators:
            self.generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[device]


def _plan(layer: LayerState, m: int, k: int, n: int, dgrad: bool) -> dict[tuple[Role, str], Pass]:
    """The layer's passes by (role, product): one Pass may serve two products (then it is quantized once). Kept on
    the layer per shape (hashing the recipe at every call would cost more than the rest of the lookup)."""
    key = (m, k, n, dgrad)
    plan = layer.plans.get(key)
    if plan is None:
        plan = layer.plans[key] = _plan_of(layer.recipe, m, k, n, dgrad)
    return plan


@functools.lru_cache(maxsize=1024)
def _plan_of(recipe: TrainingRecipe, m: int, k: int, n: int, dgrad: bool) -> dict[tuple[Role, str], Pass]:
    out: dict[tuple[Role, str], Pass] = {}
    for p in passes(recipe, m, k, n, dgrad):
        for product in p.products:
            out[p.role, product] = p
    return out


def _operand(
    layer: LayerState, p: Pass | None, t: torch.Tensor, counting: bool, train: bool, down: bool = False
) -> torch.Tensor:
    """``t`` (2-D, float32) as the pass stores it, blocks along its last axis (``down``: along its first); with the
    rotation, rotated along that axis first (padded to a multiple of 16, and left rotated). No pass: ``t``."""
    if p is None:
        return t
    if layer.recipe.is_bf16(p.role):
        q = t.to(torch.bfloat16).to(torch.float32)
        if counting:
            c = layer.counts.setdefault(p.role, Counts())
            nonzero = t != 0
            c.values += t.numel()
            c.nonzero += int(nonzero.sum())
            c.flushed += int((nonzero & (q == 0)).sum())
            c.saturated += int(torch.isinf(q).logical_and(torch.isfinite(t)).sum())
        return q
    r = p.recipe
    assert r is not None
    x = rotate(t, down=down) if p.rotated else t
    counts = layer.counts.setdefault(p.role, Counts()) if counting else None
    generator = layer.model_state.generator(x.device) if p.rounding == "stochastic" else None
    scale = None
    delayed = None
    if layer.recipe.scaling == "delayed" and r.block is None:
        delayed = layer.delayed.get(p.role)
        if delayed is None:
            delayed = layer.delayed[p.role] = DelayedScale(
                r.element_format, layer.recipe.amax_history, layer.recipe.margin
            )
        scale = delayed.current(x.device)
    q, amax = _quantize(x, r, p.rounding, generator, counts, scale=scale, down=down)
    if delayed is not None and train:
        delayed.record(amax)
    return q


def _fp32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else t.to(torch.float32)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def _no_autocast(device_type: str) -> contextlib.AbstractContextManager[Any]:
    """Autocast off for the products (they are FP32's); no context at all where it is off already (entering one
    costs more than a small layer's quantization)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type=device_type, enabled=False)
    return contextlib.nullcontext()


class LinearFunction(torch.autograd.Function):
    """A linear layer's step with every operand of its three products quantized per its layer's recipe.

    ``forward(x, weight, bias, layer)``: ``y = Q(x) @ Q(w).T + b`` (blocks along K); backward: ``dx = Q(dy) @ Q(w)``
    (blocks along N; not computed where ``x`` needs no gradient) and ``dw = Q(dy).T @ Q(x)`` (blocks along M, both
    rotated first with the recipe's ``hadamard``), ``db = sum(dy)``; every product in FP32. A tensor read by two
    products is quantized once where :func:`lensa.numerics.training_recipes.passes` says the two copies are the same
    numbers.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, layer: LayerState
    ) -> torch.Tensor:
        with _no_autocast(x.device.type):
            k = x.shape[-1]
            x2 = _fp32(x.reshape(-1, k))
            w = _fp32(weight)
            n, m = w.shape[0], x2.shape[0]
            plan = _plan(layer, m, k, n, bool(ctx.needs_input_grad[0]))
            train = any(ctx.needs_input_grad[:3])
            counting = layer.model_state.counting and train
            x_pass, w_pass = plan.get(("input", "fprop")), plan.get(("weight", "fprop"))
            xq = _operand(layer, x_pass, x2, counting, train)
            wq = _operand(layer, w_pass, w, counting, train)
            y = xq @ wq.T
            if bias is not None:
                y = y + _fp32(bias)
        # What the backward products read: the copy made here where the same numbers serve, else the FP32 tensor.
        x_reused = x_pass is not None and plan.get(("input", "wgrad")) is x_pass
        w_reused = w_pass is not None and plan.get(("weight", "dgrad")) is w_pass
        ctx.save_for_backward(xq if x_reused else x2, wq if w_reused else w)
        ctx.reused = (x_reused, w_reused)
        ctx.layer, ctx.plan, ctx.counting = layer, plan, counting
        ctx.shape, ctx.has_bias, ctx.dtypes = x.shape, bias is not None, (x.dtype, weight.dtype)
        return _as(y.reshape(*x.shape[:-1], n), torch.promote_types(x.dtype, weight.dtype))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x_saved, w_saved = ctx.saved_tensors
        layer: LayerState = ctx.layer
        plan: dict[tuple[Role, str], Pass] = ctx.plan
        x_reused, w_reused = ctx.reused
        counting = ctx.counting
        dx = dw = db = None
        with _no_autocast(grad.device.type):
            n = w_saved.shape[0]
            g2 = _fp32(grad.reshape(-1, n))
            g_dgrad, g_wgrad = plan.get(("grad", "dgrad")), plan.get(("grad", "wgrad"))
            gq = None
            if ctx.needs_input_grad[0]:
                gq = _operand(layer, g_dgrad, g2, counting, True)
                wn = (
                    w_saved
                    if w_reused
                    else _operand(layer, plan.get(("weight", "dgrad")), w_saved, counting, True, True)
                )
                dx = _as((gq @ wn).reshape(ctx.shape), ctx.dtypes[0])
            if ctx.needs_input_grad[1]:
                # Both inputs along M; the rotation, where the recipe has it, on both (an FP32 one too).
                if gq is not None and g_dgrad is not None and g_wgrad is g_dgrad:
                    gm = gq
                else:
                    gm = _operand(layer, g_wgrad, g2, counting, True, True)
                x_pass = plan.get(("input", "wgrad"))
                xm = x_saved if x_reused else _operand(layer, x_pass, x_saved, counting, True, True)
                if layer.recipe.hadamard:
                    if g_wgrad is None or not g_wgrad.rotated:
                        gm = rotate(gm, down=True)
                    if x_pass is None or not x_pass.rotated:
                        xm = rotate(xm, down=True)
                dw = _as(gm.T @ xm, ctx.dtypes[1])
            if ctx.has_bias and ctx.needs_input_grad[2]:
                db = _as(g2.sum(0), ctx.dtypes[1])
        return dx, dw, db, None


def _apply_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, layer: LayerState) -> Any:
    return LinearFunction.apply(x, weight, bias, layer)  # type: ignore[no-untyped-call]  # torch's Function.apply has no annotations


# The layer keeps state Dynamo cannot trace (the delayed scales, the counts, the generator's keys) and quantizes in
# numba's kernel: a model under torch.compile breaks its graph around each quantized layer, which runs as it is,
# eagerly, both ways (the same losses as without torch.compile, tests/test_lowp.py).
_quantized_linear: Callable[..., Any] = torch.compiler.disable(_apply_linear)


class _Lowp(nn.Module):
    """What a quantized layer adds to the class :func:`quantize_model` took it from (``_lowp_base``): ``lowp``, its
    :class:`LayerState`, and a forward that is :class:`LinearFunction` (the base's own forward where the layer is
    switched off, :func:`full_precision`)."""

    lowp: LayerState
    _lowp_base: type[nn.Module]

    def _lowp_weight(self) -> torch.Tensor:
        """The weight as ``nn.Linear`` holds it: (out, in)."""
        return cast(torch.Tensor, cast(Any, self).weight)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not self.lowp.enabled:
            out: torch.Tensor = self._lowp_base.forward(self, input)
            return out
        out = _quantized_linear(input, self._lowp_weight(), cast(Any, self).bias, self.lowp)
        return out


class LowpLinear(_Lowp, nn.Linear):
    """An ``nn.Linear`` whose forward is :class:`LinearFunction` (made by :func:`quantize_model` from a model's own
    layers, in place: the same parameters, names and hooks). ``lowp`` holds its :class:`LayerState`."""

    _lowp_base = nn.Linear

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.lowp.recipe.key}"


# transformers' Conv1D (GPT-2's, GPT's): a linear layer whose weight is stored transposed, (in, out), and whose
# forward is ``x @ weight + bias``. Known by its class's place, so that transformers is never imported here.
_CONV1D = ("transformers.pytorch_utils", "Conv1D")
_LOWP_CLASSES: dict[type[nn.Module], type[_Lowp]] = {nn.Linear: LowpLinear}


def _conv1d_layer(base: type[nn.Module]) -> type[_Lowp]:
    """The quantized class for transformers' ``Conv1D`` (made once, a subclass of it, so ``isinstance`` checks in
    transformers still hold; it is this module's ``LowpConv1D``, so a quantized model can be pickled)."""
    if base not in _LOWP_CLASSES:

        def weight(self: Any) -> torch.Tensor:
            return cast(torch.Tensor, self.weight.T)

        def representation(self: Any) -> str:
            return f"LowpConv1D(nf={self.nf}, nx={self.nx}, recipe={self.lowp.recipe.key})"

        cls = type(
            "LowpConv1D",
            (_Lowp, base),
            {"__module__": __name__, "_lowp_base": base, "_lowp_weight": weight, "__repr__": representation},
        )
        cls.__doc__ = "transformers' ``Conv1D`` made to quantize as :class:`LowpLinear` does (its weight transposed)."
        globals()["LowpConv1D"] = cls
        _LOWP_CLASSES[base] = cls
    return _LOWP_CLASSES[base]


def _lowp_class(m: nn.Module) -> type[_Lowp] | None:
    """The quantized class for a layer :func:`quantize_model` wraps: an exact ``nn.Linear`` (a subclass may have a
    forward of its own), transformers' ``Conv1D``, or a layer it wrapped before; None for any other module."""
    t = type(m)
    if isinstance(m, _Lowp):
        return t  # type: ignore[return-value]  # already one of ours
    if t is nn.Linear:
        return LowpLinear
    if (t.__module__, t.__name__) == _CONV1D:
        return _conv1d_layer(t)
    return None


def training_recipe(recipe: str | TrainingRecipe | Recipe, **options: Any) -> TrainingRecipe:
    """A :class:`lensa.numerics.training_recipes.TrainingRecipe`: a key of
    :data:`lensa.numerics.training_recipes.TRAINING_RECIPES`, a TrainingRecipe, or a block recipe (a key of
    :data:`lensa.numerics.blockscale.RECIPES` or a Recipe) for all three tensors; ``options`` replace its fields
    (``grad_rounding="stochastic"``, ``hadamard=True``, ``weight_2d=True``, ``keep_bf16=2`` ...)."""
    if isinstance(recipe, TrainingRecipe):
        base = recipe
    elif isinstance(recipe, str) and recipe in TRAINING_RECIPES:
        base = TRAINING_RECIPES[recipe]
    else:
        r = get_recipe(recipe)
        base = TrainingRecipe(r.key, r.label, r, r, r)
    unknown = set(options) - set(TrainingRecipe.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(sorted(unknown))} for a training recipe")
    return replace(base, **options) if options else base


def quantize_model(
    model: nn.Module,
    recipe: str | TrainingRecipe | Recipe,
    *,
    seed: int = 0,
    skip: Iterable[str] = (),
    **options: Any,
) -> nn.Module:
    """Make every linear layer of ``model`` (those named in ``skip`` aside) train with ``recipe``; returns ``model``.

    The linear layers are the ``nn.Linear`` modules and transformers' ``Conv1D`` (GPT-2's attention and MLP
    layers, whose weight is stored transposed). ``recipe`` and ``options`` as :func:`training_recipe`. The layers
    change in place (their class becomes :class:`LowpLinear`, or ``LowpConv1D``): parameters, names, hooks and a
    Recorder's view of them stay as they were, so an optimizer made before keeps working. The recipe's
    ``keep_bf16`` last of them (in ``model.named_modules()`` order) run in BF16
    (:func:`lensa.numerics.training_recipes.bf16_layer`). ``seed`` seeds the stochastic rounding's draws (one generator
    per device for the whole model). Subclasses of ``nn.Linear`` with forwards of their own are left alone. A model with
    no layer to quantize, or whose every layer ``keep_bf16`` keeps in BF16, is told so in a warning. Calling it again
    replaces the recipe; :func:`restore_model` undoes it.
    """
    chosen = training_recipe(recipe, **options)
    skipped = set(skip)
    state = ModelState(seed=seed)
    layers = [
        (name, m, cls)
        for name, m in model.named_modules()
        if name not in skipped and (cls := _lowp_class(m)) is not None
    ]
    if not layers:
        warnings.warn(
            f"quantize_model found no layer to quantize in {type(model).__name__}: it wraps nn.Linear and "
            "transformers' Conv1D (not their subclasses with forwards of their own), and the model is unchanged",
            stacklevel=2,
        )
    elif chosen.keep_bf16 >= len(layers):
        warnings.warn(
            f"the recipe {chosen.key} keeps the last {chosen.keep_bf16} linear layer(s) in BF16 and "
            f"{type(model).__name__} has {len(layers)}: none is quantized below BF16 (keep_bf16=0 quantizes them)",
            stacklevel=2,
        )
    for i, (name, m, cls) in enumerate(layers):
        in_bf16 = i >= len(layers) - chosen.keep_bf16
        m.__class__ = cls
        cast(_Lowp, m).lowp = LayerState(name, bf16_layer(chosen) if in_bf16 else chosen, state)
    return model


def lowp_layers(model: nn.Module) -> list[_Lowp]:
    """The model's quantized layers, in ``named_modules()`` order."""
    return [m for m in model.modules() if isinstance(m, _Lowp)]


def restore_model(model: nn.Module) -> nn.Module:
    """Undo :func:`quantize_model`: the layers are plain ``nn.Linear`` (or ``Conv1D``) again."""
    for m in lowp_layers(model):
        m.__class__ = m._lowp_base  # type: ignore[assignment]  # back to the class quantize_model took it from
        del m.lowp
    return model


def reset(model: nn.Module) -> None:
    """Start the recipe's state afresh: delayed scales, counts, and the stochastic draws from the seed again."""
    for m in lowp_layers(model):
        m.lowp.reset()
        m.lowp.model_state.generators.clear()


def set_counting(model: nn.Module, on: bool = True) -> None:
    """Count what the quantizations lose (flushed, saturated) from now on, or stop (``on=False``)."""
    for m in lowp_layers(model):
        m.lowp.model_state.counting = on


@contextlib.contextmanager
def full_precision(model: nn.Module) -> Iterator[None]:
    """Within the block, the quantized layers compute as plain FP32 ``nn.Linear`` (an evaluation of the weights)."""
    layers = lowp_layers(model)
    before = [m.lowp.enabled for m in layers]
    for m in layers:
        m.lowp.enabled = False
    try:
        yield
    finally:
        for m, was in zip(layers, before, strict=True):
            m.lowp.enabled = was


def layer_shares(model: nn.Module) -> tuple[LayerShare, ...]:
    """Each quantized layer's tensors' shares flushed and saturated, summed over the steps counted."""
    out = []
    for m in lowp_layers(model):
        for role in ROLES:
            c = m.lowp.counts.get(role)
            if c is None or not c.values:
                continue
            flushed = c.flushed / c.nonzero if c.nonzero else 0.0
            out.append(LayerShare(m.lowp.name, role, c.values, flushed, c.saturated / c.values))
    return tuple(out)


def warm_up() -> None:
    """Load the compiled kernel (:mod:`lensa.lowp_kernels`) in both its forms, counting and not, where numba runs:
    a fraction of a second from numba's cache, several seconds the first time on a machine, when it compiles. The
    lab's clock calls it before it times anything."""
    if _kernels() is None:
        return
    x = torch.ones(2, 16)
    r = get_recipe("nvfp4")
    _quantize(x, r)
    _quantize(x, r, counts=Counts())


def pass_timer(p: Pass, delayed: bool, rows: int, cols: int, device: str, counting: bool = False) -> Any:
    """A function that makes pass ``p`` once on a (rows, cols) tensor of normal values on ``device``: what the
    lab's clock times (:mod:`lensa.live.clock`). ``delayed``: keep a delayed scale, as ``fp8_delayed`` does."""
    spec: Any = BF16 if p.recipe is None else p.recipe
    probe = TrainingRecipe(
        "probe",
        "probe",
        spec,
        spec,
        spec,
        p.rounding,
        p.rounding,
        p.rounding,
        scaling="delayed" if delayed else "current",
    )
    layer = LayerState("probe", probe, ModelState(seed=0))
    t = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0)).to(device)

    def run() -> torch.Tensor:
        return _operand(layer, p, t, counting, True, p.down)

    return run


__all__ = [
    "BF16",
    "ROTATION_ERROR",
    "Counts",
    "DelayedScale",
    "LayerShare",
    "LayerState",
    "LinearFunction",
    "LowpLinear",
    "ModelState",
    "fake_quantize",
    "full_precision",
    "layer_shares",
    "lowp_layers",
    "quantize_model",
    "reset",
    "restore_model",
    "rotate",
    "set_counting",
    "training_recipe",
    "warm_up",
]
