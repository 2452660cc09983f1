"""Record what a real training loop's tensors look like to FP16, BF16 and FP8, without keeping the tensors.

:class:`Recorder` hooks a model (and its optimizer) and, at a few chosen steps, summarises five kinds of
tensor with :func:`summarize_tensor` / :func:`summarize_update_tensors`: :func:`lensa.runstats.summarize` /
:func:`lensa.runstats.summarize_update` bit for bit, with the per-value work done by torch, each with what every
block recipe of :data:`lensa.blockscale.RECIPES` loses on the tensor as it is shaped (``recipes=True``: the
shares flushed and saturated and the SQNR, equal to :func:`lensa.blockscale.lost`). Only those small
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
  the weight that step's activations and gradients were computed with (before the step's update). A loop
  that never calls the model itself, only its parts (a LightningModule's ``training_step`` calling
  ``self.model``), has them read when the first hooked module returns, before any can change.
- ``activation``: the output of each hooked module (see below) in the step's first forward pass; a tuple or
  list output gives its first tensor. Only passes with autograd on count, so an evaluation pass under
  ``torch.no_grad()`` in the same step is left out.
- ``activation_grad``: the gradient of the loss with respect to that output, from a hook on the output tensor
  (registered only at recorded steps, so other steps pay nothing). With ``scaler=`` it is divided by the loss
  scale the backward pass used, giving the true gradient.
- ``weight_grad``: each parameter's ``.grad``, read just before ``optimizer.step()`` runs (an optimizer step
  pre-hook; just after it when ``step`` is given a closure that runs the backward pass, as Lightning does, or
  when GradScaler leaves the unscaling to a fused optimizer, as Hugging Face's default ``adamw_torch_fused``),
  or, when the optimizer did not step (a skipped FP16 step, or no optimizer given), at
  :meth:`Recorder.step`. ``GradScaler.step`` unscales the gradients in place before it steps or skips, so
  these are the true (unscaled) gradients; an overflowed step's inf and NaN are counted as they are.
- ``update``: each parameter before and after ``optimizer.step()`` (step pre- and post-hooks; needs the
  optimizer), summarised by :func:`lensa.runstats.summarize_update`. A skipped step has no update.

Hooked modules: by default every *leaf* module (one without children: Linear, Embedding, LayerNorm, GELU,
Dropout ...), named as ``model.named_modules()`` names them (``blocks.0.mlp.fc``); pass ``modules=`` to
choose others by name (a block, say). A module called several times in one forward pass is read at its first
call. The model itself is hooked only when it has no children.

Per step (every step, recorded or not): with ``amax=True``, each tensor's amax, its largest magnitude (for
weights, weight gradients, activations and activation gradients, not updates; the true
gradient's with ``scaler=``): one reduction per tensor, kept as float32 in the run
(:meth:`lensa.runstats.RunStats.amax`), what a delayed-scaling FP8 recipe's amax history would hold
(:func:`lensa.blockscale.replay_delayed`); the loss passed to :meth:`Recorder.step` (NaN when none is
given), and with ``scaler=`` the loss scale that step used and whether its optimizer step was skipped.
A step is *skipped* when the optimizer was given and its ``step()`` did not run (GradScaler found inf or
NaN in the gradients) or ran as a fused step that GradScaler told of an inf or NaN (``found_inf``: such a
step changes no weight inside the kernel); without the optimizer, when the scale after ``scaler.update()`` is
below the one the step used (GradScaler backs off only after an inf or NaN). These per-step scalars take a
few dozen bytes each.

Cost: at steps that are not recorded, each hooked module and each optimizer step runs one Python call that
returns at once; with ``amax=True``, also each tensor's largest and smallest value (one fused ``abs`` and ``max``
over all weights, and again over all weight gradients; ``amax()`` and ``amin()`` of each module output and its
gradient, which allocate nothing, and a hook on each module output for its gradient), read back once per step
with one ``stack``: about 12% of the reference model's 14 ms step (120 tensors; thread CPU time, median of 3
interleaved runs of 55 steps, where ``abs().amax()`` per tensor cost 25%). At recorded steps, by default
(``background=True``), a hook only copies its tensor as float32 into a ring of shared memory (128 MiB, made when the
recorder is), and a process of numpy (:mod:`lensa.live.summaries`) summarises the copies beside the training loop,
on another core; the records come back when the run is read (:meth:`Recorder.stats`, :meth:`Recorder.save`,
:meth:`Recorder.close`).
On the small reference model (:mod:`lensa.live.reference`, 120 tensors, 5.1 M values a recorded step) a
recorded step then costs the training thread about 1.2 times a bare one; summarised inside the step
(``background=False``), about 5 times: about 1 to 2 ns per value of torch integer work plus 100 to 300
microseconds per tensor (``make bench``, docs/performance.md). With ``recipes=True`` the summary process also
computes what every block recipe loses: compiled where numba is installed (:mod:`lensa.blockscale_jit`, about
0.4 ns per value and recipe, 70 ms for the activations and their gradients of a recorded step of the reference
model), with numpy elsewhere (2 to 3 ns, 170 ms); the recorder waits at its start for the summary process to
have loaded it. With ``amax=True`` too, a recorded step costs about 1.2 to 1.25 times a bare one at the median
on a shared machine (at a recorded step a summarised tensor's amax is taken by its summary, from the copy); inside
the step, about 11 times. When the ring is full, a hook
waits for the process (:attr:`Recorder.waited_seconds` says how long), so memory stays bounded; a tensor larger
than the ring is summarised in the hook. Fewer ``kinds`` or ``modules`` cost less either way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from lensa.live.schedule import DEFAULT_RECORDED_STEPS as DEFAULT_RECORDED_STEPS
from lensa.live.schedule import log_spaced_steps as log_spaced_steps
from lensa.live.summaries import Held, InlineSummaries, ProcessSummaries
from lensa.live.summaries import summarize_tensor as summarize_tensor
from lensa.live.summaries import summarize_update_tensors as summarize_update_tensors
from lensa.runstats import KINDS, RunStats


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list):
        return next((o for o in out if isinstance(o, torch.Tensor)), None)
    return None


def _summary_sink(run: RunStats, background: bool, recipes: bool) -> InlineSummaries | ProcessSummaries:
    if background:
        try:
            return ProcessSummaries(run, recipes=recipes)
        except OSError:  # no shared memory or no child processes here: summarise in the step
            pass
    return InlineSummaries(run, recipes=recipes)


def _checked_kinds(kinds: Iterable[str], optimizer: torch.optim.Optimizer | None) -> tuple[str, ...]:
    """The kinds to record, each known, and ``update`` only with the optimizer."""
    chosen = tuple(kinds)
    unknown = [k for k in chosen if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    if "update" in chosen and optimizer is None:
        raise ValueError("recording updates needs the optimizer: Recorder(model, optimizer, ...)")
    return chosen


def _step_set(steps: int | Iterable[int] | None) -> frozenset[int] | None:
    """The recorded steps (see :class:`Recorder`'s ``steps``); None: powers of two, without end."""
    if steps is None:
        return None
    if isinstance(steps, int):
        return frozenset(log_spaced_steps(steps))
    chosen = frozenset(int(s) for s in steps)
    if any(s < 1 for s in chosen):
        raise ValueError("steps count from 1")
    return chosen


def _output_modules(model: torch.nn.Module, modules: Iterable[str] | None) -> list[tuple[str, torch.nn.Module]]:
    """The modules whose outputs are recorded, by name: those named, or every leaf (the model itself when it has
    no children)."""
    all_modules = dict(model.named_modules())
    if modules is None:
        chosen = [(n, m) for n, m in all_modules.items() if n and not any(True for _ in m.children())]
        if not chosen and not any(True for _ in model.children()):
            chosen = [(type(model).__name__, model)]
        return chosen
    names = list(modules)
    missing = [n for n in names if n not in all_modules]
    if missing:
        raise ValueError(f"the model has no modules named {missing}")
    return [(n or type(model).__name__, all_modules[n]) for n in names]


class Recorder:
    """Summaries of a model's weights, gradients, activations and updates at chosen training steps.

    ``steps``: an int is the run's total number of steps, recorded at :func:`log_spaced_steps` of it
    (about 12, the last included); an iterable gives the steps to record exactly (each >= 1); None records
    steps 1, 2, 4, 8, ... (powers of two, without end). ``optimizer`` enables ``update`` and reads
    ``weight_grad`` just before each step; ``scaler`` (a ``torch.amp.GradScaler``) gives the loss scale
    history, the skipped steps and true activation gradients. ``kinds`` limits what is recorded (a subset
    of :data:`lensa.runstats.KINDS`); ``modules`` names the modules whose outputs are recorded (default:
    every leaf module). ``meta`` (JSON values) is stored with the run. ``amax`` (default False) keeps each
    tensor's largest magnitude at every step, recorded or not (a max and a min per tensor per step: about
    12% more time per step of the reference model on a CPU). ``recipes`` (default False) keeps, at each
    recorded step, what every block recipe loses on each tensor (file version 2's recipe records: about 0.1 s
    of the summary process's time per recorded step of the reference model where numba is installed, the
    ``[fast]`` extra, and 0.2 s with numpy alone, see docs/performance.md).
    ``background`` (default True): the summaries are made by a process of their own from copies of the
    tensors (see the module's text); False makes them inside the step, with torch (the same records, bit for
    bit).

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
        amax: bool = False,
        recipes: bool = False,
    ) -> None:
        self._kinds = _checked_kinds(kinds, optimizer)
        self._steps = _step_set(steps)
        self._amax_kinds = frozenset(k for k in self._kinds if k != "update") if amax else frozenset()
        self._pending_amax: list[tuple[str, str, torch.Tensor, torch.Tensor | None, float | None]] = []
        self._model = model
        self._optimizer = optimizer
        self._scaler = scaler
        self._run = RunStats(meta)
        self._params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in self._params]
        self._weights = [p for _, p in self._params]
        chosen = _output_modules(model, modules)

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
        # Made now (a summary process starts while the caller sets up its loop); none when no step is recorded.
        recorded_any = self._steps is None or bool(self._steps)
        self._summary_sink = _summary_sink(self._run, background, recipes) if recorded_any else None

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
        assert self._summary_sink is not None, "only a recorded step summarises, and then there is a sink"
        return self._summary_sink

    def _add(self, kind: str, name: str, values: torch.Tensor) -> None:
        self._summaries.tensor(kind, name, self.current_step, values, amax=kind in self._amax_kinds)

    def _keep_amax(self, kind: str, name: str, t: torch.Tensor, scale: float | None = None) -> None:
        """Queue the amax of ``t`` (divided by ``scale``) for this step; read at :meth:`step`, all at once. (Only
        where ``t`` is not summarised this step: a summarised tensor's amax is taken from the summary's own copy, by
        the summary process, and comes in with its record.)

        Kept as the tensor's largest and smallest value (two reductions that allocate nothing, where ``abs()``
        would write a copy of the tensor first); |x|'s largest is the larger of max and -min, taken for all the
        step's tensors at once in :meth:`_flush_amax`. A NaN propagates through both."""
        if kind in self._amax_kinds and t.numel():
            d = t.detach()
            self._pending_amax.append((kind, name, d.amax(), d.amin(), scale))

    def _keep_amaxes(self, kind: str, names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
        """:meth:`_keep_amax` for a list of parameters or gradients, with one fused ``abs`` and ``max`` over them."""
        if kind not in self._amax_kinds:
            return
        kept = [(n, t.detach()) for n, t in zip(names, tensors, strict=True) if t.numel()]
        if not kept:
            return
        with torch.no_grad():
            tops = torch._foreach_max(torch._foreach_abs([t for _, t in kept]))
        for (name, _), top in zip(kept, tops, strict=True):
            self._pending_amax.append((kind, name, top, None, None))

    def _flush_amax(self) -> None:
        pending, self._pending_amax = self._pending_amax, []
        if not pending:
            return
        device = pending[0][2].device

        def here(t: torch.Tensor) -> torch.Tensor:
            return t if t.device == device else t.to(device)

        tops = torch.stack([here(p[2]) for p in pending]).float()
        lows = [(i, p[3]) for i, p in enumerate(pending) if p[3] is not None]
        if lows:
            index = torch.tensor([i for i, _ in lows], device=device)
            below = torch.stack([here(low) for _, low in lows]).float().neg_()
            tops[index] = torch.maximum(tops[index], below)
        values = tops.tolist()
        labels = [(p[0], p[1]) for p in pending]
        amaxes = [v if p[4] is None else v / p[4] for p, v in zip(pending, values, strict=True)]
        self._run.record_amaxes(self.current_step, labels, amaxes)

    def _on_model_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._started or not torch.is_grad_enabled():
            return
        self._started = True
        if self._want("weight"):  # the summaries take the amax from their copies (see _keep_amax)
            amax = "weight" in self._amax_kinds
            self._summaries.tensors("weight", self._names, self.current_step, self._weights, amax=amax)
        else:
            self._keep_amaxes("weight", self._names, self._weights)

    def _output_hook(self, name: str) -> Callable[[torch.nn.Module, Any, Any], None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not (self._recording or self._amax_kinds) or name in self._seen or not torch.is_grad_enabled():
                return
            if not self._started:  # the model's own forward was not called (Lightning's training_step calls a part)
                self._on_model_forward(module, args)
            self._seen.add(name)
            out = _first_tensor(output)
            if out is None or not out.is_floating_point():
                return
            if not self._want("activation"):
                self._keep_amax("activation", name, out)
            if "activation_grad" in self._amax_kinds and out.requires_grad and not self._recording:
                out.register_hook(self._grad_hook(name))
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
            scale = self._scale if scaled else None
            if self._want("activation_grad"):
                amax = "activation_grad" in self._amax_kinds
                self._summaries.tensor("activation_grad", name, step, grad, scale, amax=amax)
            else:
                self._keep_amax("activation_grad", name, grad, scale)

        return hook

    def _read_grads(self) -> None:
        if self._grads_read or not (self._want("weight_grad") or "weight_grad" in self._amax_kinds):
            return
        self._grads_read = True
        names, grads = [], []
        for name, p in self._params:
            if p.grad is not None:
                names.append(name)
                grads.append(p.grad)
        if self._want("weight_grad"):
            amax = "weight_grad" in self._amax_kinds
            self._summaries.tensors("weight_grad", names, self.current_step, grads, amax=amax)
        else:
            self._keep_amaxes("weight_grad", names, grads)

    def _on_optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not (self._recording or "weight_grad" in self._amax_kinds):
            return
        closure = any(callable(a) for a in args) or kwargs.get("closure") is not None  # args: (optimizer, ...)
        fused_unscale = isinstance(getattr(optimizer, "grad_scale", None), torch.Tensor)
        # With a closure (Lightning's loop, LBFGS) the backward pass has not run yet; with a fused optimizer that
        # GradScaler hands its scale to (grad_scale), the step itself unscales .grad. Either way: read them after.
        if not closure and not fused_unscale:
            self._read_grads()
        if not self._recording:
            return
        if self._want("update"):
            self._before = self._summaries.hold(self._weights)

    def _on_optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # A fused optimizer stepped by GradScaler (found_inf set) runs its step always and skips inside it.
        found_inf = getattr(optimizer, "found_inf", None)
        skipped = isinstance(found_inf, torch.Tensor) and bool(found_inf.item() != 0)
        self._stepped = not skipped
        if self._recording or "weight_grad" in self._amax_kinds:
            self._read_grads()  # a closure made them, or the fused step unscaled them; the step leaves .grad be
        if self._before is None:
            return
        before, self._before = self._before, None
        if skipped:  # the weights did not change: no update
            self._summaries.release_held()
            return
        names, befores, afters = [], [], []
        for (name, p), b in zip(self._params, before, strict=True):
            if p.grad is not None:
                names.append(name)
                befores.append(b)
                afters.append(p)
        self._summaries.updates("update", names, self.current_step, befores, afters)
        self._summaries.release_held()

    # --- the user's calls -------------------------------------------------------------------------------

    def step(self, loss: float | torch.Tensor | None = None) -> None:
        """End the current step: keep its loss (and, with a scaler, its loss scale and skip flag), move on.

        Call once per training step, after ``optimizer.step()`` / ``scaler.step(optimizer)`` and
        ``scaler.update()``. ``loss`` may be a tensor (read with ``float()``) or None (kept as NaN).
        """
        if self._recording or "weight_grad" in self._amax_kinds:
            self._read_grads()  # a skipped step, or no optimizer: .grad as it is now
        self._flush_amax()
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

    def read_gradients(self) -> None:
        """Read each parameter's ``.grad`` now, for this step's ``weight_grad`` (once a step; later calls do nothing).

        For loops that clear the gradients before the step ends: a skipped FP16 step never runs the optimizer's
        step hooks, so without this call its gradients would be read at :meth:`step`, after they are gone. Call it
        after ``scaler.step(optimizer)`` (which unscales them in place, steps or skips) and before ``zero_grad``.
        At a step that is not recorded only their amax is read (with ``amax=True``).
        """
        if self._recording or "weight_grad" in self._amax_kinds:
            self._read_grads()

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
