""":func:`lensa.numerics.blockscale.lost_all`'s pass, compiled with numba: every recipe over each stretch of a row, in
one read.

The numpy pass of :mod:`lensa.numerics.blockscale` makes about ten whole-array passes per recipe over each cached piece.
Compiled (:mod:`lensa.numerics.blockscale_numba`), each recipe is one loop over values already in the first-level cache,
and the twelve recipes of :data:`lensa.numerics.blockscale.RECIPES` together cost about a quarter of the numpy pass
(``bench.recipes_speed``). The arithmetic is the numpy pass's, value for value: ``|x| / scale`` in FP32 (times
the exact inverse where the scale is a power of two, the same number), the saturation test, the magic-number
rounding to the element's grid, and the squared error ``(|x| - element * scale)**2``, exact in float64. So the
counts are the numpy pass's and the squared errors are the same numbers; only the order in which they are
summed differs, which can move an SQNR in its last bits (``tests/test_blockscale_jit.py`` holds the two passes to
a relative 1e-12 and the counts to equality).

The sums are made in an order fixed by the tensor's shape alone, not by the recipes, the CPU or the threads: the
values are read in *stretches* (whole short rows end to end, or parts of a long row, up to :data:`STRETCH`
values), gathered into *chunks* of about :data:`CHUNK` values (:func:`stretches`); a recipe's blocks are cut
where a stretch starts or ends inside one. So a recipe's numbers do not depend on which recipes are asked with
it, and :func:`lensa.numerics.blockscale.lost` is :func:`lensa.numerics.blockscale.lost_all` with one recipe. Within a
chunk each squared error goes to one of eight running sums by its place in its stretch (``i % 8``); each chunk's eight
sums are added in order, and the chunks in order. Threads take whole chunks.
Every operation is IEEE float32 or float64 arithmetic, neither reassociated nor contracted (numba's default), so
the numbers are the same whatever vector width LLVM compiles for (``make test-kernels`` compiles for the
baseline x86-64 CPU too, and ``tests/test_blockscale_jit.py`` compares the two).

numba is optional: :func:`available` says whether it is installed and not switched off (``LENSA_NUMBA=0``); the
numpy pass runs where it is not, and for tensors of fewer than :data:`MIN_VALUES` values. The lesson pages never
import it: numba loads (and compiles, or reads its cache) on the first tensor of :data:`MIN_VALUES` values or
more that a process summarises.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

MIN_VALUES = 64  # fewer take the numpy pass and load no compiler: the Block scaling page's block of 16 or 32
STRETCH = 8192  # values a stretch of a long row reads at most
CHUNK = 1 << 16  # values a chunk gathers (about): the unit of the summing order and of the threads

_loading = threading.Lock()


@dataclass(frozen=True)
class Constants:
    """Recipes as the compiled pass reads them: one entry per recipe in each array (``lensa.numerics.blockscale`` makes
    them, once per tuple of recipes).

    ``rule``: the scale rule's code (:mod:`lensa.numerics.blockscale_numba`' ``AMAX``, ``MX_FLOOR``, ``MX_CEIL``,
    ``NVFP4``). ``block_rows``, ``block_cols``: the block shape, ``WHOLE`` (-1) for a whole axis, and
    ``block_rows`` ``TENSOR`` (-2) for one block over the tensor. ``max_elem``, ``emax``, ``frac_top``: the
    element's largest value, its largest exponent and the largest value's fraction bits (the MX rules). ``two``:
    a power-of-two scale (divide by multiplying by its exact inverse). ``top``: a scaled value above it saturates
    (inf where the rule keeps every value within range). ``limit``, ``low``, ``shift``: the element's largest
    value and the rounding's constants, as ``lensa.numerics.blockscale._Rounding``. ``e4m3``: E4M3's smallest normal,
    its largest value, and NVFP4's tensor divisor 448 * 6; ``grid``: E4M3's ``low`` and ``shift`` (NVFP4's scales).
    """

    rule: NDArray[np.int64]
    block_rows: NDArray[np.int64]
    block_cols: NDArray[np.int64]
    max_elem: NDArray[np.float32]
    emax: NDArray[np.int64]
    frac_top: NDArray[np.uint32]
    two: NDArray[np.bool_]
    top: NDArray[np.float32]
    limit: NDArray[np.float32]
    low: NDArray[np.uint32]
    shift: NDArray[np.uint32]
    e4m3: NDArray[np.float32]
    grid: NDArray[np.uint32]


_given_up: str | None = None  # why the pass was switched off in this process (numba could not compile it)


def available() -> bool:
    """Whether the compiled pass runs here: numba installed, ``LENSA_NUMBA`` not set to ``0``, and not given up."""
    if os.environ.get("LENSA_NUMBA", "").strip() == "0" or _given_up is not None:
        return False
    return _kernels() is not None


def attempt(run: Callable[[], Any], what: str = "the block-recipe pass, numpy's runs instead") -> tuple[bool, Any]:
    """``(True, run())``; or ``(False, None)`` where numba itself fails (a numba or LLVM this code was not written
    for: it cannot type or compile the pass): the compiled passes are then switched off for the process, with a
    warning naming ``what`` (the pass, and what runs instead), and the caller takes the numpy (or torch) pass, which
    gives the same numbers. Any other error is raised."""
    global _given_up
    try:
        return True, run()
    except Exception as e:
        if not type(e).__module__.startswith(("numba", "llvmlite")):
            raise
        _given_up = f"{type(e).__name__}: {e}"
        warnings.warn(
            f"lensa: numba could not compile {what} ({_given_up[:300]})",
            RuntimeWarning,
            stacklevel=2,
        )
        return False, None


@cache
def _kernels() -> ModuleType | None:
    with _loading:
        try:
            from lensa.numerics import blockscale_numba
        except ImportError:  # numba (or its llvmlite) is not installed
            return None
        except RuntimeError:  # numba found nowhere writable to keep its cache: compile in each process instead
            sys.modules.pop("lensa.numerics.blockscale_numba", None)
            os.environ["LENSA_NUMBA_CACHE"] = "0"
            from lensa.numerics import blockscale_numba
        return blockscale_numba


def stretches(rows: int, cols: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The stretches of a ``rows`` x ``cols`` matrix, as (first row, first column, end): the values from column
    ``first column`` of ``first row`` on, to column ``end`` of the rows read one after another (``end`` past
    ``cols`` runs on through the next rows); and the chunks, as bounds into the stretches (chunk k is stretches
    ``marks[k]`` to ``marks[k + 1]``). Both depend on the shape alone, never on the recipes, so neither do the
    sums: rows of at most :data:`STRETCH` values whose length blocks of 16, 32 and 128 (or of the whole row, where
    it is shorter) divide are read as many whole rows a stretch as fit in it (a recipe's setup per stretch, not
    per short row; the shipped recipes' blocks then never cross a row's end); other rows one a stretch (a block
    that the row's end cuts short is then read whole, zeros after it), longer rows in parts of :data:`STRETCH`
    values. A chunk is CHUNK / (the stretch length), rounded up, stretches in a row (the last may have fewer)."""
    if cols <= STRETCH and all(cols % min(w, cols) == 0 for w in (16, 32, 128)):
        tall = max(1, STRETCH // max(cols, 1))
        starts = np.arange(0, rows, tall, dtype=np.int64)
        table = np.zeros((starts.size, 3), np.int64)
        table[:, 0] = starts
        table[:, 2] = np.minimum(tall, rows - starts) * cols
        step = tall * cols
    elif cols <= STRETCH:
        table = np.zeros((rows, 3), np.int64)
        table[:, 0] = np.arange(rows, dtype=np.int64)
        table[:, 2] = cols
        step = cols
    else:
        per_row = -(-cols // STRETCH)
        table = np.empty((rows * per_row, 3), np.int64)
        table[:, 0] = np.repeat(np.arange(rows, dtype=np.int64), per_row)
        table[:, 1] = np.tile(np.arange(per_row, dtype=np.int64) * STRETCH, rows)
        table[:, 2] = np.minimum(table[:, 1] + STRETCH, cols)
        step = STRETCH
    group = max(1, -(-CHUNK // max(step, 1)))
    marks = np.append(np.arange(0, len(table), group, dtype=np.int64), np.int64(len(table)))
    return table, marks


def row_maxima(
    bits: NDArray[np.uint32], width: int, workers: int, on_threads: Callable[[Callable[[int, int], Any], int, int], Any]
) -> NDArray[np.uint32]:
    """Each row's largest magnitudes, as bits, in blocks of ``width`` columns (a last partial block included):
    what ``lensa.numerics.blockscale._amax16`` gives, in one compiled read."""
    k = _loaded()
    rows, cols = bits.shape
    out = np.empty((rows, -(-cols // width)), np.uint32)
    on_threads(lambda r0, r1: k.row_maxima(bits, out, r0, r1, width), rows, workers)
    return out


def _loaded() -> ModuleType:
    k = _kernels()
    if k is None:
        raise RuntimeError("numba is not installed: the compiled pass is not available here")
    return k


OnThreads = Callable[[Callable[[int, int], Any], int, int], Any]


def _maxima(bits: NDArray[np.uint32], lead: int, rows: int, c: Constants, workers: int, on_threads: OnThreads) -> Any:
    """(maxima, first, per_row, width, the NVFP4 tensor scale) for the recipes of ``c``
    (:func:`lensa.numerics.blockscale_numba.block_maxima`), or None for a tensor with an infinity or a NaN."""
    k = _loaded()
    a16 = row_maxima(bits, 16, workers, on_threads)
    top = np.uint32(a16.max())
    if top >= 0x7F800000:
        return None
    tensor_amax = top.view(np.float32)
    # as blockscale._nvfp4_tensor_scale: amax / (448 * 6), 1 for zeros, at least FP32's smallest number 2**-149
    ts = np.float32(tensor_amax / c.e4m3[2]) if tensor_amax > 0 else np.float32(1.0)
    ts = max(ts, np.float32(np.finfo(np.float32).smallest_subnormal))
    return (*k.block_maxima(a16, bits, lead, rows, top, c.block_rows, c.block_cols), ts)


def lost(
    bits: NDArray[np.uint32], lead: int, rows: int, c: Constants, workers: int, on_threads: OnThreads
) -> tuple[float, int, list[tuple[int, int, float]]] | None:
    """The pass over a tensor (``bits``: its rows as uint32; ``lead`` matrices of ``rows`` rows) for every recipe of
    ``c``: (the sum of x**2, the count of values not 0, and per recipe (values saturated, elements not 0, the sum of
    squared errors)); None for a tensor with an infinity or a NaN. ``on_threads(fn, count, workers)`` runs
    ``fn(start, stop)`` over ranges of the chunks (``lensa.numerics.blockscale._on_threads``)."""
    k = _loaded()
    got = _maxima(bits, lead, rows, c, workers, on_threads)
    if got is None:
        return None
    maxima, first, per_row, width, ts = got
    n_rows, cols = bits.shape
    table, marks = stretches(n_rows, cols)
    n_chunks, n_rec = marks.size - 1, c.rule.size
    out_sat = np.zeros((n_chunks, n_rec), np.int64)
    out_kept = np.zeros((n_chunks, n_rec), np.int64)
    out_noise = np.zeros((n_chunks, n_rec, k.LANES))
    out_signal = np.zeros((n_chunks, 1, k.LANES))
    out_nonzero = np.zeros(n_chunks, np.int64)
    signal_rows = out_signal.reshape(n_chunks, k.LANES)
    scales = (maxima, first, per_row, width, c.rule, c.max_elem, c.emax, c.frac_top, ts, c.e4m3, c.grid)
    consts = (*scales, c.two, c.top, c.limit, c.low, c.shift)

    def part(k0: int, k1: int) -> None:
        k.chunks_pass(bits, table, marks, k0, k1, *consts, out_sat, out_kept, out_noise, signal_rows, out_nonzero)

    on_threads(part, n_chunks, workers)
    noise = k.in_order(out_noise)
    sat, kept = out_sat.sum(axis=0), out_kept.sum(axis=0)
    per = [(int(sat[r]), int(kept[r]), float(noise[r])) for r in range(n_rec)]
    return float(k.in_order(out_signal)[0]), int(out_nonzero.sum()), per


def store(
    bits: NDArray[np.uint32], lead: int, rows: int, c: Constants, out: NDArray[np.float64], on_threads: OnThreads
) -> bool:
    """What the one recipe of ``c`` stores for the tensor whose rows are ``bits``
    (``lensa.numerics.blockscale.quantize``), into ``out`` (float64, the same rows): element * scale with each value's
    sign, as ``lensa.numerics.blockscale._store_piece``. False (and ``out`` untouched) for a tensor with an infinity or
    a NaN."""
    k = _loaded()
    got = _maxima(bits, lead, rows, c, 1, on_threads)
    if got is None:
        return False
    maxima, _, per_row, width, ts = got
    n_rows, cols = bits.shape
    table, _ = stretches(n_rows, cols)
    recipe = (c.max_elem[0], c.emax[0], c.frac_top[0], ts, c.e4m3, c.grid)
    k.store_pass(
        bits, table, maxima, per_row[0], width[0], c.rule[0], recipe, c.two[0], c.limit[0], c.low[0], c.shift[0], out
    )
    return True
