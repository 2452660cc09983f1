"""Record what a real training loop's tensors look like to FP16, BF16 and FP8, without keeping the tensors.

:class:`Recorder` hooks a model (and its optimizer) and, at a few chosen steps, summarises five kinds of
tensor with :func:`summarize_tensor` / :func:`summarize_update_tensors`: :func:`lensa.runstats.summarize` /
:func:`lensa.runstats.summarize_update` bit for bit, with the per-value work done by torch. Only those small
summaries are kept (a :class:`lensa.runstats.TensorStats` is a few kilobytes, whatever the tensor's size), so
memory stays flat however long the run; :meth:`Recorder.stats` gives a :class:`lensa.runstats.RunStats` and
:meth:`Recorder.save` writes it to a file that the measured-data pages read.

Where the calls go, in PyTorch's AMP recipe (the lines marked ``+`` are the recorder's)::

    recorder = Recorder(model, optimizer, steps=total_steps, scaler=scaler)     # +
    for step in range(1, total_steps + 1):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)                  # unscales .grad in place, then steps or skips
        scaler.update()
        recorder.step(loss=loss)                                                # + once per step, last
    recorder.save("run.npz")                                                    # +
    recorder.close()                                                            # + (or use `with Recorder(...)`)

Steps count from 1: the n-th call of :meth:`Recorder.step` ends step n. What is read, and when, at a
recorded step (all as float32 on the CPU, ``t.detach().float().cpu()``, which is exact for FP16 and BF16
tensors):

- ``weight``: each parameter (``model.named_parameters()``), read at the step's first forward pass, so it is
  the weight that step's activations and gradients were computed with (before the step's update).
- ``activation``: the output of each hooked module (see below) in the step's first forward pass; a tuple or
  list output gives its first tensor. Only passes with autograd on count, so an evaluation pass under
  ``torch.no_grad()`` in the same step is left out.
- ``activation_grad``: the gradient of the loss with respect to that output, from a hook on the output tensor
  (registered only at recorded steps, so other steps pay nothing). With ``scaler=`` it is divided by the loss
  scale the backward pass used, giving the true gradient.
- ``weight_grad``: each parameter's ``.grad``, read just before ``optimizer.step()`` runs (an optimizer step
  pre-hook) or, when the optimizer did not step (a skipped FP16 step, or no optimizer given), at
  :meth:`Recorder.step`. ``GradScaler.step`` unscales the gradients in place before it steps or skips, so
  these are the true (unscaled) gradients; an overflowed step's inf and NaN are counted as they are.
- ``update``: each parameter before and after ``optimizer.step()`` (step pre- and post-hooks; needs the
  optimizer), summarised by :func:`lensa.runstats.summarize_update`. A skipped step has no update.

Hooked modules: by default every *leaf* module (one without children: Linear, Embedding, LayerNorm, GELU,
Dropout ...), named as ``model.named_modules()`` names them (``blocks.0.mlp.fc``); pass ``modules=`` to
choose others by name (a block, say). A module called several times in one forward pass is read at its first
call. The model itself is hooked only when it has no children.

Per step (every step, recorded or not): the loss passed to :meth:`Recorder.step` (NaN when none is
given), and with ``scaler=`` the loss scale that step used and whether its optimizer step was skipped.
A step is *skipped* when the optimizer was given and its ``step()`` did not run (GradScaler found inf or
NaN in the gradients); without the optimizer, when the scale after ``scaler.update()`` is below the one the
step used (GradScaler backs off only after an inf or NaN). These per-step scalars take a few dozen bytes
each.

Cost: at steps that are not recorded, each hooked module and each optimizer step runs one Python call that
returns at once. At recorded steps, by default (``background=True``), a hook only copies its tensor as
float32 into a ring of shared memory (128 MiB, made when the recorder is), and a numpy-only process
(:mod:`lensa.live.summaries`) summarises the copies beside the training loop, on another core; the records
come back when the run is read (:meth:`Recorder.stats`, :meth:`Recorder.save`, :meth:`Recorder.close`). On
the small reference model (:mod:`lensa.live.reference`, 120 tensors, 5.1 M values a recorded step) a
recorded step then costs the training thread about 1.2 times a bare one; summarised inside the step
(``background=False``), about 5 times: about 1 to 2 ns per value of torch integer work plus 100 to 300
microseconds per tensor (``make bench``, docs/performance.md). When the ring is full, a hook waits for the
process (:attr:`Recorder.waited_seconds` says how long), so memory stays bounded; a tensor larger than the
ring is summarised in the hook. Fewer ``kinds`` or ``modules`` cost less either way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from lensa.live.schedule import DEFAULT_RECORDED_STEPS as DEFAULT_RECORDED_STEPS
from lensa.live.schedule import log_spaced_steps as log_spaced_steps
from lensa.live.summaries import Held, InlineSummaries, ProcessSummaries
from lensa.runstats import BINADE_MIN, KINDS, N_BINADES, RunStats, TensorStats, exact_fractions, from_histograms


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list):
        return next((o for o in out if isinstance(o, torch.Tensor)), None)
    return None


# --- the summaries, binned with torch ------------------------------------------------------------------------

_FINE = 1 << (23 - 12)  # fine bins per binade: the top 11 fraction bits
_EXP_SPECIAL = 255  # exponent field of inf and NaN
_PACK = 2.0**32  # a value's weight is 2**32 + its low 12 bits: a bin's sum is count * 2**32 + sum of low bits
_CHUNK = 1 << 20  # values per bincount: keeps each packed sum below 2**53


def _frac_mask(fractions: tuple[int, ...]) -> int:
    """Fraction bits that are 0 in every one of ``fractions``: a value with any of them set is none of those F."""
    either = 0
    for f in fractions:
        either |= f
    return ((1 << 23) - 1) & ~either


_EXACT = exact_fractions()
_CANDIDATE_MASK = _frac_mask(_EXACT)


_SUB_ROWS = -126 - BINADE_MIN  # binades of float32 subnormals: -149 ... -127, the grid's first 23 rows
_NORMAL_OFFSET = (_SUB_ROWS - 1) * _FINE  # grid bin of a normal value = its key (exponent field, top 11 bits) + this


def _exact_counts(frac: np.ndarray, row: np.ndarray) -> np.ndarray:
    """(len(_EXACT), 277): per grid row, how many of the values (fraction bits ``frac``, row ``row``) have each F."""
    return np.stack([np.bincount(row[frac == f], minlength=N_BINADES) for f in _EXACT]).astype(np.int64)


def _summarize_bits(bits: torch.Tensor, lost_counts: tuple[int, ...] | None = None) -> TensorStats:
    """:func:`lensa.runstats.summarize` of float32 values given as their int32 bit patterns (1-D, CPU), in torch.

    The per-value work is integer work in torch (the key, exponent field and top 11 fraction bits; one
    ``bincount`` per 2**20 values whose weight packs the count and the low 12 bits; a masked test for the
    few values :func:`lensa.runstats.exact_fractions` names). What is left is per non-empty bin and is done by
    :func:`lensa.runstats.from_histograms`, which :func:`~lensa.runstats.summarize` ends with too, so the
    record equals ``summarize`` of those values bit for bit (tests/test_capture.py checks it).
    """
    n = bits.numel()
    keys, counts, lows = [], [], []
    for start in range(0, n, _CHUNK):
        b = bits[start : start + _CHUNK]
        chunk_key = torch.bitwise_right_shift(b, 12).bitwise_and_(0x7FFFF)
        lo = int(chunk_key.min())
        weight = torch.bitwise_and(b, 0xFFF).to(torch.float64).add_(_PACK)
        packed = torch.bincount(chunk_key.sub_(lo), weights=weight).numpy()
        nz = np.flatnonzero(packed)
        p = packed[nz]
        # count * 2**32 + low sum, the low sum below 2**32 (at most 2**20 values of at most 4095): floor is the count
        c = np.floor(p * (1 / _PACK))
        keys.append(nz + lo)
        counts.append(c)
        lows.append(p - c * _PACK)
    key: NDArray[Any]
    count: NDArray[Any]
    low: NDArray[Any]
    if len(keys) > 1:
        key, where = np.unique(np.concatenate(keys), return_inverse=True)
        count = np.bincount(where, weights=np.concatenate(counts))  # exact: integers below 2**53
        low = np.bincount(where, weights=np.concatenate(lows))
    elif keys:
        key, count, low = keys[0], counts[0], lows[0]
    else:
        key, count, low = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    count = count.astype(np.int64)
    i_normal, i_special = np.searchsorted(key, [_FINE, _EXP_SPECIAL * _FINE])

    mag: torch.Tensor | None = None

    def magnitudes() -> torch.Tensor:
        nonlocal mag
        if mag is None:
            mag = torch.bitwise_and(bits, 0x7FFFFFFF)
        return mag

    # Key 0 holds |bits| < 2**12 and key 255 * 2**11 holds [inf, inf + 2**12): when their low bits add up to 0
    # they hold only zeros, only infinities; otherwise count those exactly (tiny subnormals, NaNs).
    zeros = 0
    if key.size and key[0] == 0:
        zeros = int(count[0]) if low[0] == 0 else int(torch.count_nonzero(magnitudes() == 0))
    infs = 0
    if i_special < key.size and key[i_special] == _EXP_SPECIAL * _FINE:
        infs = int(count[i_special]) if low[i_special] == 0 else int(torch.count_nonzero(magnitudes() == 0x7F800000))
    nan = int(count[i_special:].sum()) - infs
    subnormals = int(count[:i_normal].sum()) - zeros

    bins = key[i_normal:i_special] + _NORMAL_OFFSET
    count, low = count[i_normal:i_special], low[i_normal:i_special]
    exact = np.zeros((len(_EXACT), N_BINADES), np.int64)
    # The values whose F is one of _EXACT: a cheap test lets through those (and zeros, and a few more).
    if int(torch.count_nonzero(torch.bitwise_and(bits, _CANDIDATE_MASK) == 0)) > zeros:
        m = magnitudes()[torch.bitwise_and(bits, _CANDIDATE_MASK) == 0].numpy()
        m = m[(m >= 0x00800000) & (m < 0x7F800000)]  # normal values; subnormals are counted below
        exact += _exact_counts(m & 0x7FFFFF, (m >> 23).astype(np.int64) + _SUB_ROWS - 1)
    if subnormals:
        mags = magnitudes()
        sub = mags[(mags < 0x00800000) & (mags != 0)].numpy()
        # Times 2**64 is exact for a float32 subnormal and makes it normal: its exponent is then its binade + 64.
        norm = (sub.view(np.float32) * np.float32(2.0**64)).view(np.int32)
        row = (norm >> 23).astype(np.int64) - 127 - 64 - BINADE_MIN
        frac = norm & 0x7FFFFF
        sub_bins, where = np.unique(row * _FINE + (frac >> 12), return_inverse=True)
        bins = np.concatenate([sub_bins, bins])  # subnormal rows come first on the grid
        count = np.concatenate([np.bincount(where).astype(np.int64), count])
        low = np.concatenate([np.bincount(where, weights=frac & 0xFFF), low])
        exact += _exact_counts(frac, row)
    return from_histograms(
        size=n,
        exact_zero=zeros,
        inf=infs,
        nan=nan,
        bins=bins,
        fine_count=count,
        fine_low_sum=low,
        exact_at=exact,
        lost_counts=lost_counts,
    )


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as float32 on the CPU, their bit patterns as a 1-D int32 tensor (no copy if possible)."""
    return t.detach().float().cpu().contiguous().view(-1).view(torch.int32)


def summarize_tensor(t: torch.Tensor) -> TensorStats:
    """:func:`lensa.runstats.summarize` of a torch tensor's values read as float32, computed with torch.

    Equal to ``summarize(t.detach().float().cpu().numpy())`` bit for bit, counts and relative error sums
    alike (FP16 and BF16 tensors are read exactly; float64 ones are rounded to float32 first). About 1 to 2
    ns of CPU per value on one core, against about 13 for the numpy binning.
    """
    return _summarize_bits(_as_bits(t))


_CASTS: tuple[tuple[torch.dtype, float | None], ...] = (  # SUMMARY_FORMATS: torch's type, saturation bound
    (torch.float16, None),
    (torch.bfloat16, None),
    (torch.float8_e4m3fn, 448.0),  # E4M3 saturates (lensa.formats): clamp first; torch would give NaN past 464
    (torch.float8_e5m2, None),
)


def _stored(x: torch.Tensor, dtype: torch.dtype, bound: float | None) -> torch.Tensor:
    """``x`` (float32) stored in the format and read back as float32, as :func:`lensa.formats.cast` stores it."""
    if bound is not None:
        x = x.clamp(-bound, bound)  # NaN stays NaN
    return x.to(dtype).to(torch.float32)


def summarize_update_tensors(w_before: torch.Tensor, w_after: torch.Tensor) -> TensorStats:
    """:func:`lensa.runstats.summarize_update` of two torch tensors, computed with torch; equal bit for bit.

    Both are read as float32 and must have the same shape (ValueError otherwise). The update is
    ``w_after - w_before`` in float32; the lost counts use torch's casts (round to nearest, ties to even,
    FP8 E4M3 saturating at ±448 like :func:`lensa.formats.cast`).
    """
    if w_before.shape != w_after.shape:
        raise ValueError(f"w_before has shape {tuple(w_before.shape)} but w_after has {tuple(w_after.shape)}")
    before = w_before.detach().float().cpu().reshape(-1)
    update = w_after.detach().float().cpu().reshape(-1) - before
    moved = update != 0
    lost = []
    for dtype, bound in _CASTS:
        stored = _stored(before, dtype, bound)
        again = _stored(stored + update, dtype, bound)
        lost.append(int(torch.count_nonzero(moved & (again == stored))))
    return _summarize_bits(update.view(torch.int32), lost_counts=tuple(lost))


def _summarize_unscaled(values: torch.Tensor, scale: float) -> TensorStats:
    """:func:`summarize_tensor` of the true gradient: float32 ``values`` divided by the loss ``scale``."""
    return summarize_tensor(_unscaled(values, scale))


def _unscaled(values: torch.Tensor, scale: float) -> torch.Tensor:
    """float32 ``values / scale``, each quotient correctly rounded (numpy's float32 division).

    A power-of-two scale (GradScaler's, with its default factors) divides in torch as a multiplication by
    its exact reciprocal; any other goes through numpy, whose division rounds each quotient once.
    """
    mantissa, _ = math.frexp(scale)
    if mantissa == 0.5 and 2.0**-126 <= 1 / scale <= 2.0**127:
        return values * (1 / scale)
    return torch.from_numpy(values.numpy() / np.float32(scale))


class Recorder:
    """Summaries of a model's weights, gradients, activations and updates at chosen training steps.

    ``steps``: an int is the run's total number of steps, recorded at :func:`log_spaced_steps` of it
    (about 12, the last included); an iterable gives the steps to record exactly (each >= 1); None records
    steps 1, 2, 4, 8, ... (powers of two, without end). ``optimizer`` enables ``update`` and reads
    ``weight_grad`` just before each step; ``scaler`` (a ``torch.amp.GradScaler``) gives the loss scale
    history, the skipped steps and true activation gradients. ``kinds`` limits what is recorded (a subset
    of :data:`lensa.runstats.KINDS`); ``modules`` names the modules whose outputs are recorded (default:
    every leaf module). ``meta`` (JSON values) is stored with the run. ``background`` (default True): the
    summaries are made by a process of their own from copies of the tensors (see the module's text); False
    makes them inside the step, with torch (the same records, bit for bit).

    Call :meth:`step` once per training step, after ``optimizer.step()`` (and ``scaler.update()``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        steps: int | Iterable[int] | None = None,
        scaler: torch.amp.GradScaler | None = None,
        kinds: Iterable[str] = KINDS,
        modules: Iterable[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        background: bool = True,
    ) -> None:
        self._kinds = tuple(kinds)
        unknown = [k for k in self._kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
        if "update" in self._kinds and optimizer is None:
            raise ValueError("recording updates needs the optimizer: Recorder(model, optimizer, ...)")
        if steps is None:
            self._steps: frozenset[int] | None = None
        elif isinstance(steps, int):
            self._steps = frozenset(log_spaced_steps(steps))
        else:
            self._steps = frozenset(int(s) for s in steps)
            if any(s < 1 for s in self._steps):
                raise ValueError("steps count from 1")
        self._model = model
        self._optimizer = optimizer
        self._scaler = scaler
        self._run = RunStats(meta)
        self._background = background
        self._summary_sink: InlineSummaries | ProcessSummaries | None = None
        self._params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        all_modules = dict(model.named_modules())
        if modules is None:
            chosen = [(n, m) for n, m in all_modules.items() if n and not any(True for _ in m.children())]
            if not chosen and not any(True for _ in model.children()):
                chosen = [(type(model).__name__, model)]
        else:
            names = list(modules)
            missing = [n for n in names if n not in all_modules]
            if missing:
                raise ValueError(f"the model has no modules named {missing}")
            chosen = [(n or type(model).__name__, all_modules[n]) for n in names]

        self.current_step = 1  # the step in progress; step() ends it
        self._recording = self._is_recorded(1)
        self._started = False  # the step's first forward pass has begun
        self._seen: set[str] = set()  # modules whose output this step has been read (or hooked for its grad)
        self._grads_seen: set[str] = set()  # modules whose output gradient this step has been read
        self._grads_read = False
        self._stepped = False
        self._before: list[Held] | None = None
        self._scale = float(scaler.get_scale()) if scaler is not None else None  # the scale this step uses

        self._handles: list[Any] = [model.register_forward_pre_hook(self._on_model_forward)]
        for name, module in chosen:
            self._handles.append(module.register_forward_hook(self._output_hook(name)))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._on_optimizer_pre))
            self._handles.append(optimizer.register_step_post_hook(self._on_optimizer_post))
        if self._steps is None or self._steps:
            self._summaries  # noqa: B018  (starts the summary process now, while the caller sets up its loop)

    # --- schedule ---------------------------------------------------------------------------------------

    def _is_recorded(self, step: int) -> bool:
        if self._steps is None:
            return step & (step - 1) == 0
        return step in self._steps

    @property
    def recorded_steps(self) -> tuple[int, ...] | None:
        """The steps that will be recorded (None: powers of two, without end)."""
        return None if self._steps is None else tuple(sorted(self._steps))

    def _want(self, kind: str) -> bool:
        return self._recording and kind in self._kinds

    # --- hooks ------------------------------------------------------------------------------------------

    @property
    def waited_seconds(self) -> float:
        """Seconds the training loop waited for the summary process to free room for its copies (0 inline)."""
        return 0.0 if self._summary_sink is None else self._summary_sink.waited

    @property
    def _summaries(self) -> InlineSummaries | ProcessSummaries:
        if self._summary_sink is None:
            if self._background:
                try:
                    self._summary_sink = ProcessSummaries(self._run)
                except OSError:  # no shared memory or no child processes here: summarise in the step
                    self._summary_sink = InlineSummaries(self._run)
            else:
                self._summary_sink = InlineSummaries(self._run)
        return self._summary_sink

    def _add(self, kind: str, name: str, values: torch.Tensor) -> None:
        self._summaries.tensor(kind, name, self.current_step, values)

    def _on_model_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._started or not torch.is_grad_enabled():
            return
        self._started = True
        if self._want("weight"):
            for name, p in self._params:
                self._add("weight", name, p)

    def _output_hook(self, name: str) -> Callable[[torch.nn.Module, Any, Any], None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not self._recording or name in self._seen or not torch.is_grad_enabled():
                return
            self._seen.add(name)
            out = _first_tensor(output)
            if out is None or not out.is_floating_point():
                return
            if self._want("activation"):
                self._add("activation", name, out)
            if self._want("activation_grad") and out.requires_grad:
                out.register_hook(self._grad_hook(name))

        return hook

    def _grad_hook(self, name: str) -> Callable[[torch.Tensor], None]:
        step = self.current_step

        def hook(grad: torch.Tensor) -> None:
            if step != self.current_step or name in self._grads_seen:
                return
            self._grads_seen.add(name)
            scaled = self._scaler is not None and self._scaler.is_enabled()
            self._summaries.tensor("activation_grad", name, step, grad, self._scale if scaled else None)

        return hook

    def _read_grads(self) -> None:
        if self._grads_read or not self._want("weight_grad"):
            return
        self._grads_read = True
        for name, p in self._params:
            if p.grad is not None:
                self._add("weight_grad", name, p.grad)

    def _on_optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._recording:
            return
        self._read_grads()
        if self._want("update"):
            self._before = [self._summaries.hold(p) for _, p in self._params]

    def _on_optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True
        if self._before is None:
            return
        before, self._before = self._before, None
        for (name, p), b in zip(self._params, before, strict=True):
            if p.grad is not None:
                self._summaries.update("update", name, self.current_step, b, p)
        self._summaries.release_held()

    # --- the user's calls -------------------------------------------------------------------------------

    def step(self, loss: float | torch.Tensor | None = None) -> None:
        """End the current step: keep its loss (and, with a scaler, its loss scale and skip flag), move on.

        Call once per training step, after ``optimizer.step()`` / ``scaler.step(optimizer)`` and
        ``scaler.update()``. ``loss`` may be a tensor (read with ``float()``) or None (kept as NaN).
        """
        if self._recording:
            self._read_grads()  # a skipped step, or no optimizer: .grad as it is now
        value = math.nan if loss is None else float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        scale, skipped = None, False
        if self._scaler is not None and self._scale is not None and self._scaler.is_enabled():
            after = float(self._scaler.get_scale())
            scale = self._scale
            skipped = not self._stepped if self._optimizer is not None else after < scale
            self._scale = after
        self._run.record_step(self.current_step, value, scale, skipped)
        if self._recording and self._summary_sink is not None:
            self._summary_sink.flush()  # the step's copies go to the summary process now
        self.current_step += 1
        self._recording = self._is_recorded(self.current_step)
        self._started = self._grads_read = self._stepped = False
        self._seen.clear()
        self._grads_seen.clear()
        self._before = None

    def stats(self) -> RunStats:
        """The run so far, every summary queued until now included (the same object each time; it grows)."""
        if self._summary_sink is not None:
            self._summary_sink.drain()
        return self._run

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the run so far to ``path`` (a ``.npz`` file for :func:`lensa.runstats.load`)."""
        self.stats().save(path)

    def close(self) -> None:
        """Remove every hook from the model and the optimizer, and finish the summaries still queued.

        The statistics stay available. Raises the first error met while summarising, if any.
        """
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._summary_sink is not None:
            self._summary_sink.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
