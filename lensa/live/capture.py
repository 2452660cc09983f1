"""Record what a real training loop's tensors look like to FP16, BF16 and FP8, without keeping the tensors.

:class:`Recorder` hooks a model (and its optimizer) and, at a few chosen steps, summarises five kinds of
tensor with :func:`lensa.runstats.summarize` / :func:`lensa.runstats.summarize_update`. Only those small
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
returns at once. At recorded steps the summaries are computed in the hooks, inside the training step, at
a few tens of nanoseconds of CPU per value summarised: on the small reference model
(:mod:`lensa.live.reference`) a recorded step costs about 9 times a bare one, and a 300-step run with 11
recorded steps about 1.3 times (``make bench``, docs/performance.md). Fewer ``kinds`` or ``modules`` cost less.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from lensa.live.schedule import DEFAULT_RECORDED_STEPS as DEFAULT_RECORDED_STEPS
from lensa.live.schedule import log_spaced_steps
from lensa.runstats import KINDS, RunStats, summarize, summarize_update


def _as_float32(t: torch.Tensor) -> np.ndarray:
    """The tensor's values as a float32 numpy array on the CPU (no copy when it is float32 there already)."""
    return t.detach().float().cpu().numpy()


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list):
        return next((o for o in out if isinstance(o, torch.Tensor)), None)
    return None


class Recorder:
    """Summaries of a model's weights, gradients, activations and updates at chosen training steps.

    ``steps``: an int is the run's total number of steps, recorded at :func:`log_spaced_steps` of it
    (about 12, the last included); an iterable gives the steps to record exactly (each >= 1); None records
    steps 1, 2, 4, 8, ... (powers of two, without end). ``optimizer`` enables ``update`` and reads
    ``weight_grad`` just before each step; ``scaler`` (a ``torch.amp.GradScaler``) gives the loss scale
    history, the skipped steps and true activation gradients. ``kinds`` limits what is recorded (a subset
    of :data:`lensa.runstats.KINDS`); ``modules`` names the modules whose outputs are recorded (default:
    every leaf module). ``meta`` (JSON values) is stored with the run.

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
        self._before: list[torch.Tensor] | None = None
        self._scale = float(scaler.get_scale()) if scaler is not None else None  # the scale this step uses

        self._handles: list[Any] = [model.register_forward_pre_hook(self._on_model_forward)]
        for name, module in chosen:
            self._handles.append(module.register_forward_hook(self._output_hook(name)))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._on_optimizer_pre))
            self._handles.append(optimizer.register_step_post_hook(self._on_optimizer_post))

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

    def _add(self, kind: str, name: str, values: np.ndarray) -> None:
        self._run.add(kind, name, self.current_step, summarize(values))

    def _on_model_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._started or not torch.is_grad_enabled():
            return
        self._started = True
        if self._want("weight"):
            for name, p in self._params:
                self._add("weight", name, _as_float32(p))

    def _output_hook(self, name: str) -> Callable[[torch.nn.Module, Any, Any], None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not self._recording or name in self._seen or not torch.is_grad_enabled():
                return
            self._seen.add(name)
            out = _first_tensor(output)
            if out is None or not out.is_floating_point():
                return
            if self._want("activation"):
                self._add("activation", name, _as_float32(out))
            if self._want("activation_grad") and out.requires_grad:
                out.register_hook(self._grad_hook(name))

        return hook

    def _grad_hook(self, name: str) -> Callable[[torch.Tensor], None]:
        step = self.current_step

        def hook(grad: torch.Tensor) -> None:
            if step != self.current_step or name in self._grads_seen:
                return
            self._grads_seen.add(name)
            values = _as_float32(grad)
            if self._scaler is not None and self._scaler.is_enabled():
                values = values / np.float32(self._scale)  # exact for a power-of-two scale
            self._add("activation_grad", name, values)

        return hook

    def _read_grads(self) -> None:
        if self._grads_read or not self._want("weight_grad"):
            return
        self._grads_read = True
        for name, p in self._params:
            if p.grad is not None:
                self._add("weight_grad", name, _as_float32(p.grad))

    def _on_optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._recording:
            return
        self._read_grads()
        if self._want("update"):
            self._before = [p.detach().float().cpu().clone() for _, p in self._params]

    def _on_optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True
        if self._before is None:
            return
        before, self._before = self._before, None
        for (name, p), b in zip(self._params, before, strict=True):
            if p.grad is not None:
                self._run.add("update", name, self.current_step, summarize_update(b.numpy(), _as_float32(p)))

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
        if self._scaler is not None and self._scaler.is_enabled():
            after = float(self._scaler.get_scale())
            scale = self._scale
            skipped = not self._stepped if self._optimizer is not None else after < scale
            self._scale = after
        self._run.record_step(self.current_step, value, scale, skipped)
        self.current_step += 1
        self._recording = self._is_recorded(self.current_step)
        self._started = self._grads_read = self._stepped = False
        self._seen.clear()
        self._grads_seen.clear()
        self._before = None

    def stats(self) -> RunStats:
        """The run so far (the same object each time; it grows as the run goes on)."""
        return self._run

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the run so far to ``path`` (a ``.npz`` file for :func:`lensa.runstats.load`)."""
        self._run.save(path)

    def close(self) -> None:
        """Remove every hook from the model and the optimizer (the statistics stay available)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
