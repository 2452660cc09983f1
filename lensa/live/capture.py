"""Record what a real training loop's tensors look like to FP16, BF16 and FP8, without keeping the tensors.

:class:`Recorder` hooks a model (and its optimizer) and, at a few chosen steps, summarises five kinds of
tensor with :func:`summarize_tensor` / :func:`summarize_update_tensors`: :func:`lensa.runstats.summarize` /
:func:`lensa.runstats.summarize_update` bit for bit, with the per-value work done by torch, each with what every
block recipe of :data:`lensa.numerics.blockscale.RECIPES` loses on the tensor as it is shaped (``recipes=True``: the
shares flushed and saturated and the SQNR, equal to :func:`lensa.numerics.blockscale.lost`). Only those small
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
  optimizer), summarised by :func:`lensa.runstats.summarize_update`. A skipped step has no update. A weight
  held in FP32 keeps its update as after − before. A weight held in a narrower type (``model.to(torch.bfloat16)``,
  pure BF16 or FP16 training) rounds its own update away, so after − before would hide every update it lost:
  for those weights the record holds the update the optimizer *meant* to make, worked out by running the same
  optimizer's ``step`` once more, in float64, on copies of the weights, their gradients and the optimizer's
  state (nothing of the real ones changes), and every format is judged against it
  (:func:`lensa.runstats.summarize_intended`; an SGD step at lr 1e-3 on BF16 weights loses about 99% of its
  updates, and the record says so). An optimizer that cannot be copied that way (one whose ``step`` needs a
  closure, LBFGS) gets after − before, with a warning.

Each record keeps the tensor's dtype (file version 3), so the report and the pages can say when a column is
trivial: the activations of an FP16 autocast run are FP16 already, and "FP16" loses nothing of them by
construction; only an FP32 recording tells whether FP16 would do.

Hooked modules: by default every *leaf* module (one without children: Linear, Embedding, LayerNorm, GELU,
Dropout ...), named as ``model.named_modules()`` names them (``blocks.0.mlp.fc``); pass ``modules=`` to
choose others by name (a block, say). A module called several times in one forward pass is read at its first
call. The model itself is hooked only when it has no children.

Per step (every step, recorded or not): with ``amax=True``, each tensor's amax, its largest magnitude (for
weights, weight gradients, activations and activation gradients, not updates; the true
gradient's with ``scaler=``): one reduction per tensor, kept as float32 in the run
(:meth:`lensa.runstats.RunStats.amax`), what a delayed-scaling FP8 recipe's amax history would hold
(:func:`lensa.numerics.blockscale.replay_delayed`); the loss passed to :meth:`Recorder.step` (NaN when none is
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
:meth:`Recorder.close`). The module outputs and their gradients (most of the bytes) are copied by a thread of the
training process rather than in the hook, once a first recorded step has shown that the step does not change them
in place; each copy is checked against the tensor's version counter before the step ends, and a tensor that did
change is copied in the hook from then on (its record at that step left out, with a warning).
On the small reference model (:mod:`lensa.live.reference`, 120 tensors, 5.1 M values a recorded step) a
recorded step then costs 1.19 to 1.23 times a bare one, wall time, and a GPT-2 built from a config 1.27 times, a step
that records nothing 1.01 to 1.02 times (``bench.recorder_cost``, step by step, on an AMD EPYC; whole runs on a Xeon
gave 1.36 to 1.63 times at a recorded step; docs/performance.md); summarised inside the step
(``background=False``), 7 to 10 times on these two models: about 1 to 2 ns per value of torch integer work
plus 100 to 300 microseconds per tensor (``make bench``, docs/performance.md). With ``recipes=True`` the summary
process also computes what every block recipe loses: compiled where numba is installed
(:mod:`lensa.numerics.blockscale_dispatch`, about 0.4 ns per value and recipe, 70 ms for the activations and their
gradients of a recorded step of the reference model), with numpy elsewhere (2 to 3 ns, 170 ms); the recorder waits at
its start for the summary process to have loaded it. With ``amax=True`` too, a recorded step costs about 1.2 to 1.25
times a bare one at the median on a shared machine (at a recorded step a summarised tensor's amax is taken by its
summary, from the copy); inside the step, about 11 times. When the ring is full, a hook
waits for the process (:attr:`Recorder.waited_seconds` says how long), so memory stays bounded; a tensor larger
than the ring is summarised in the hook. Fewer ``kinds`` or ``modules`` cost less either way.

Never in the way. A failure inside the Recorder (a hook, a summary, the summary process, the file) is caught,
told once as a :class:`RecorderWarning` naming the part it switched off (one kind, the per-step amax, the
summaries), and training goes on with the same results it has without the Recorder: no hook changes a tensor,
a gradient or the optimizer (tests/test_capture.py trains with and without it and compares every weight, bit for
bit, with failures injected at every hook). :meth:`Recorder.stats`, :meth:`Recorder.save` and
:meth:`Recorder.close` never raise for what happened inside it.

A plan that fits. A file holds at most :data:`lensa.runstats.MAX_TENSORS` tensor records. The Recorder counts at
its start how many records its plan makes (tensors per recorded step times recorded steps) and, when that is too
many, keeps fewer steps (spread as the plan's were, the first and the last kept), and past two steps, fewer
tensors (spread evenly through the model); it says what it dropped in a :class:`RecorderWarning` then, and in the
run's meta (``"recorder"``), never by failing at the end. A 32-layer Llama-shaped model (1,521 records a step)
keeps 6 of the 11 steps a 100-step run records by default.

``torch.compile``. The hooks run outside the compiled graph: each is a ``torch.compiler.disable``'d call, so Dynamo
breaks the graph where a hooked module returns and runs the hook as ordinary Python, on real tensors, then
resumes compiled code. The records equal an eager run's; nothing in a graph reads the Recorder's state, so
switching between recorded and unrecorded steps compiles nothing again (tests/test_capture.py counts Dynamo's
recompiles under ``aot_eager`` and ``inductor``). The price is a graph per hooked module: record blocks
(``modules=["model.layers.0", ...]``) rather than every leaf to keep the graphs large, or leave out the two
activation kinds, which need no hook inside the model. Under ``fullgraph=True`` a graph cannot break: the hooks
inside the model then do nothing (a warning says so), and the weights, weight gradients and updates, read
outside the model, are recorded all the same. Attach the Recorder before the first compiled call: a graph
compiled earlier does not call hooks added later (the Recorder warns when a recorded step saw no hook).

Several ranks (DDP, FSDP2, any ``torch.distributed`` run). Names are the model's own, without the ``module.`` of
a ``DistributedDataParallel`` wrapper (or the ``_orig_mod.`` of a compiled one). A sharded parameter or gradient
(a ``DTensor``: FSDP2's ``fully_shard``) is read whole (``full_tensor()``: every rank joins the gather at a
recorded step, rank 0 summarises), so its counts, sums and block recipes are the whole tensor's, no block cut by
a shard; its per-step amax is each rank's shard's, the largest taken when the parts are merged. Weights, weight
gradients and updates are the same on every rank once gathered (DDP all-reduces the gradients) and are
summarised by rank 0 alone; each rank records its own activations and their gradients (its own batch).
:meth:`Recorder.save`, called on every rank, writes one file, from rank 0, atomically: each rank's activations
and their gradients combined (:func:`lensa.runstats.merge_ranks`: counts and sums add), the weights once, the
loss the mean over the ranks. The other ranks hand their part over through ``torch.distributed``'s store and
return at once; rank 0 waits for them (at most ``timeout`` seconds, then writes what it has and says which
ranks are missing).
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import os
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch

from lensa.live.schedule import DEFAULT_RECORDED_STEPS as DEFAULT_RECORDED_STEPS
from lensa.live.schedule import log_spaced_steps as log_spaced_steps
from lensa.live.summaries import Held, InlineSummaries, ProcessSummaries, Update, dtype_name
from lensa.live.summaries import summarize_tensor as summarize_tensor
from lensa.live.summaries import summarize_update_tensors as summarize_update_tensors
from lensa.runstats import KINDS, MAX_TENSORS, RunStats, load, merge_ranks

F = TypeVar("F", bound=Callable[..., Any])

# The kinds every rank holds the same of once gathered (summarised by rank 0); the others are each rank's own.
SHARED_KINDS: tuple[str, ...] = ("weight", "weight_grad", "update")
PARAM_KINDS = SHARED_KINDS  # one record per parameter at a recorded step
MODULE_KINDS: tuple[str, ...] = ("activation", "activation_grad")  # one record per hooked module
# How long rank 0's save waits for the other ranks' parts, in seconds.
DISTRIBUTED_SAVE_TIMEOUT_S = 300.0
# Weights held in these types round their own updates away: their update is the one the optimizer meant to make.
_NARROW = frozenset(
    t
    for t in (torch.float16, torch.bfloat16, *(getattr(torch, n, None) for n in ("float8_e4m3fn", "float8_e5m2")))
    if t is not None
)
_ids = itertools.count(1)  # Recorders made in this process, in order: the same on every rank of a run


class RecorderWarning(UserWarning):
    """A part of the :class:`Recorder` failed and was switched off, or its plan was cut to fit; training goes on."""


# --- staying out of the way of torch.compile ---------------------------------------------------------------


def _traced_single_graph() -> bool:
    """Whether Dynamo is tracing a function that may not break its graph (``fullgraph=True``); read while tracing,
    kept as a constant in the graph."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        single = bool(tx.one_graph or tx.error_on_graph_break)
    except Exception:  # another torch: Dynamo's internals moved; assume graphs may break (the default)
        return False
    if single:
        _warn_once(
            "fullgraph",
            "lensa Recorder: torch.compile(fullgraph=True) keeps the model in one graph, so the Recorder's hooks "
            "inside it do nothing there: activations and their gradients are not recorded (weights, weight "
            "gradients and updates still are). Compile without fullgraph=True to record them.",
        )
    return single


# Dynamo calls it while tracing and keeps its answer as a constant (no guard, no graph break).
_single_graph: Callable[[], bool] = torch.compiler.assume_constant_result(_traced_single_graph)


def _outside_graph(fn: F) -> F:
    """``fn`` as a hook Dynamo never traces: in eager code it is called as it is; while Dynamo traces, a call to
    it breaks the graph and runs it as Python on real tensors (``torch.compiler.disable``), or, where the graph may
    not break (``fullgraph=True``), it does nothing."""
    eager = torch.compiler.disable(fn, recursive=True)

    @functools.wraps(fn)
    def hook(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            if _single_graph():
                return None
            return eager(*args, **kwargs)
        return fn(*args, **kwargs)

    return hook  # type: ignore[return-value]  # the same signature as fn's (functools.wraps keeps its name)


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RecorderWarning, stacklevel=3)


# --- the model, the ranks ----------------------------------------------------------------------------------


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DistributedDataParallel / DataParallel (``.module``) and torch.compile's wrapper
    (``._orig_mod``), whose names carry no ``module.`` or ``_orig_mod.``."""
    while True:
        inner = getattr(model, "_orig_mod", None) if type(model).__name__ == "OptimizedModule" else None
        if isinstance(model, torch.nn.parallel.DistributedDataParallel | torch.nn.DataParallel):
            inner = model.module
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def _ranks() -> tuple[int, int]:
    """(this process's rank, the number of ranks) of the default process group; (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _dtensor_type(tensors: Iterable[torch.Tensor]) -> type | None:
    """torch's DTensor class when one of ``tensors`` is a DTensor (a sharded parameter), else None."""
    for t in tensors:
        if type(t).__name__ == "DTensor":
            from torch.distributed.tensor import DTensor

            return DTensor
    return None


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
        except (OSError, RuntimeError) as e:  # no shared memory, no child processes, or a child that died
            _warn_once(
                "no-process",
                f"lensa Recorder: the summary process could not start ({type(e).__name__}: {e}); the summaries "
                "are made inside the recorded steps instead (background=False), which costs those steps more.",
            )
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


# --- fitting the plan to what a file holds -------------------------------------------------------------------


def _spread(items: Sequence[Any], n: int) -> list[Any]:
    """``n`` of ``items`` spread evenly through them, in order, the first and the last included."""
    if n >= len(items):
        return list(items)
    if n <= 1:
        return list(items[-1:])
    picks = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in picks]


class _Plan:
    """What a Recorder records, fitted to :data:`MAX_TENSORS`: the steps (None: powers of two, at most
    ``powers`` of them), the parameters and modules, and what was dropped (None: nothing)."""

    def __init__(
        self,
        steps: frozenset[int] | None,
        params: list[tuple[str, torch.nn.Parameter]],
        modules: list[tuple[str, torch.nn.Module]],
        kinds: Sequence[str],
        budget: int = MAX_TENSORS,
    ) -> None:
        per_param = sum(k in kinds for k in PARAM_KINDS)
        per_module = sum(k in kinds for k in MODULE_KINDS)
        self.per_step_planned = per_step = per_param * len(params) + per_module * len(modules)
        self.steps, self.params, self.modules = steps, params, modules
        self.powers: int | None = None
        self.dropped: dict[str, Any] | None = None
        if per_step == 0:
            return
        if steps is None:  # powers of two without end: as many as fit
            self.powers = max(1, budget // per_step)
            if budget >= per_step:
                return
            chosen_steps = 1
        elif per_step * len(steps) <= budget:
            return
        else:
            chosen_steps = max(1, min(len(steps), budget // per_step))
        if per_step * chosen_steps > budget:  # even two steps (or one) are too many: fewer tensors too
            chosen_steps = min(2, len(steps)) if steps is not None else 1
            share = budget / (per_step * chosen_steps)
            self.params = _spread(params, math.floor(len(params) * share))
            self.modules = _spread(modules, math.floor(len(modules) * share))
            while per_param * len(self.params) + per_module * len(self.modules) > budget // chosen_steps:
                self.params = self.params[:-1] if len(self.params) > len(self.modules) else self.params
                self.modules = self.modules[:-1] if len(self.modules) >= len(self.params) else self.modules
        if steps is not None:
            self.steps = frozenset(_spread(sorted(steps), chosen_steps))
        else:
            self.powers = chosen_steps
        kept_per_step = per_param * len(self.params) + per_module * len(self.modules)
        self.dropped = {
            "records_per_step_planned": per_step,
            "records_per_step": kept_per_step,
            "steps_planned": None if steps is None else len(steps),
            "steps": None if self.steps is None else sorted(self.steps),
            "parameters": [len(self.params), len(params)],
            "modules": [len(self.modules), len(modules)],
            "budget": budget,
        }

    def message(self) -> str:
        """What the plan dropped, in a sentence for the warning (only when it dropped something)."""
        d = self.dropped
        assert d is not None
        parts = []
        if d["steps_planned"] is not None and len(d["steps"]) < d["steps_planned"]:
            parts.append(f"records {len(d['steps'])} of its {d['steps_planned']} planned steps ({_listed(d['steps'])})")
        if d["steps_planned"] is None:
            parts.append(f"records powers of two up to step {2 ** ((self.powers or 1) - 1):,}")
        if d["parameters"][0] < d["parameters"][1] or d["modules"][0] < d["modules"][1]:
            parts.append(
                f"keeps {d['parameters'][0]:,} of {d['parameters'][1]:,} parameters and "
                f"{d['modules'][0]:,} of {d['modules'][1]:,} modules, spread through the model"
            )
        return (
            f"lensa Recorder: the plan makes {d['records_per_step_planned']:,} records a recorded step, and a run "
            f"file holds at most {d['budget']:,}: it {'; it '.join(parts)}. To keep more, record fewer tensors "
            "(kinds=..., or modules=[...] naming blocks rather than every leaf) or pass steps=[...] yourself."
        )


def _listed(steps: Sequence[int]) -> str:
    shown = ", ".join(f"{s:,}" for s in steps[:8])
    return shown + (", …" if len(steps) > 8 else "")


# --- the update the optimizer meant to make -------------------------------------------------------------------


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's own shard (``to_local()``); any other tensor as it is."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) and type(t).__name__ == "DTensor" else t


class IntendedUpdates:
    """The update an optimizer's ``step()`` means to make to some of its parameters, in float64.

    Made just before the step: float64 copies of the weights (each rank's own shard, for DTensors) and of the
    optimizer's state for them. :meth:`compute`, before the step or after it (the gradients are the same: a step
    given a closure makes them inside the step; a fused step under a GradScaler unscales them in place), runs the
    same optimizer's ``step`` once on those copies with float64 copies of the gradients (divided by ``grad_scale``
    where they are still scaled): the update its rule gives, before anything is rounded into the weight's own
    type. Nothing of the real optimizer, weights or gradients changes, and its hooks do not run. Raises whatever
    the step raises, for an optimizer that cannot be copied this way.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> None:
        self._optimizer = optimizer
        self.params = list(params)
        wanted = {id(p) for p in self.params}
        self._copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._groups: list[dict[str, Any]] = []
        self._state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
        for group in optimizer.param_groups:
            options = {k: v for k, v in group.items() if k != "params"}
            for flag in ("foreach", "fused"):  # float64 on the single-tensor path, which every optimizer has
                if flag in options:
                    options[flag] = False
            shadow_params = []
            for p in group["params"]:
                if id(p) not in wanted:
                    continue
                q = _local(p).detach().to(torch.float64, copy=True)
                for key, value in optimizer.state.get(p, {}).items():
                    if isinstance(value, torch.Tensor):
                        v = _local(value).detach()
                        self._state[q][key] = v.to(torch.float64, copy=True) if v.is_floating_point() else v.clone()
                    else:
                        self._state[q][key] = copy.deepcopy(value)
                self._copies[id(p)] = (q, q.clone())
                shadow_params.append(q)
            self._groups.append({**options, "params": shadow_params})

    def compute(self, grad_scale: float | None = None) -> list[torch.Tensor | None]:
        """Per parameter, its intended update (float64; its own shard for a DTensor), None for one without a
        gradient. Once."""
        optimizer = self._optimizer
        cls = type(optimizer)
        shadow = cls.__new__(cls)
        shadow.__dict__.update(optimizer.__dict__)
        for hooks in [k for k, v in vars(shadow).items() if k.endswith("_hooks") and isinstance(v, dict)]:
            setattr(shadow, hooks, OrderedDict())
        for scaler_attr in ("grad_scale", "found_inf"):  # nothing to unscale: the gradients are unscaled here
            shadow.__dict__.pop(scaler_attr, None)
        for p in self.params:
            q = self._copies[id(p)][0]
            if p.grad is None:
                q.grad = None
                continue
            grad = _local(p.grad).detach().to(torch.float64, copy=True)
            q.grad = grad if grad_scale is None else grad.div_(grad_scale)
        shadow.param_groups = [{**g, "params": [q for q in g["params"] if q.grad is not None]} for g in self._groups]
        shadow.state = self._state
        with torch.no_grad():
            shadow.step()
        out: list[torch.Tensor | None] = []
        for p in self.params:
            q, before = self._copies[id(p)]
            out.append(None if q.grad is None else q.detach() - before)
        return out


# --- the recorder ---------------------------------------------------------------------------------------------

# The kinds a hook reads, switched off with it when something in it fails that nothing inside it caught.
_HOOK_PARTS: dict[str, tuple[str, ...]] = {
    "forward": ("weight",),
    "outputs": ("activation", "activation_grad"),
    "optimizer": ("weight_grad", "update"),
}
# What each part is, and what is left once it is off (the warning's two halves).
_PARTS: dict[str, tuple[str, str]] = {
    **{
        k: (f"recording {w}", f"{w} are no longer recorded")
        for k, w in (
            ("weight", "weights"),
            ("weight_grad", "weight gradients"),
            ("activation", "activations"),
            ("activation_grad", "activation gradients"),
            ("update", "updates"),
        )
    },
    "amax": ("keeping each tensor's amax", "no more amax is kept"),
    "summaries": ("summarising", "nothing more is summarised (each step's loss is still kept)"),
    "step": ("keeping the step's loss and loss scale", "they are no longer kept"),
    "forward": ("the hook on the model's forward pass", "weights are no longer recorded"),
    "outputs": ("a hook on a module's output", "activations and their gradients are no longer recorded"),
    "optimizer": ("a hook on the optimizer's step", "weight gradients and updates are no longer recorded"),
}


class Recorder:
    """Summaries of a model's weights, gradients, activations and updates at chosen training steps.

    ``steps``: an int is the run's total number of steps, recorded at :func:`log_spaced_steps` of it
    (about 12, the last included); an iterable gives the steps to record exactly (each >= 1); None records
    steps 1, 2, 4, 8, ... (powers of two, as many as a file holds). ``optimizer`` enables ``update`` and reads
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

    Call :meth:`step` once per training step, after ``optimizer.step()`` (and ``scaler.update()``). The plan is
    fitted to what a file holds at once (:attr:`recorded_steps`; a :class:`RecorderWarning` says what it drops).
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
        self._amax_kinds = frozenset(k for k in self._kinds if k != "update") if amax else frozenset()
        self._off: set[str] = set()  # the parts switched off after a failure
        self._pending_amax: list[tuple[str, str, torch.Tensor, torch.Tensor | None, float | None]] = []
        self._model = model = _unwrapped(model)
        self._optimizer = optimizer
        self._scaler = scaler
        self._rank, self._world = _ranks()
        self._lead = self._rank == 0
        self._id = next(_ids)
        self._saves = 0
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        want_outputs = bool({"activation", "activation_grad"} & (set(self._kinds) | self._amax_kinds))
        chosen = _output_modules(model, modules) if want_outputs or modules is not None else []
        plan = _Plan(_step_set(steps), params, chosen if want_outputs else [], self._kinds)
        self._steps, self._powers = plan.steps, plan.powers
        self._params = plan.params
        self._names = [n for n, _ in self._params]
        self._weights = [p for _, p in self._params]
        self._dtensor: Any = _dtensor_type(self._weights)  # DTensor's class, where a parameter is one
        run_meta = dict(meta or {})
        if plan.dropped is not None:
            run_meta["recorder"] = plan.dropped
            warnings.warn(plan.message(), RecorderWarning, stacklevel=2)
        if self._world > 1:
            run_meta.setdefault("ranks", self._world)
        self._run = RunStats(run_meta)

        self.current_step = 1  # the step in progress; step() ends it
        self._recording = self._is_recorded(1)
        self._started = False  # the step's first forward pass has begun
        self._weights_read = False  # this step's weights have been read (or their amax kept)
        self._hooks_ran = False  # a module's hook ran in this step
        self._seen: set[str] = set()  # modules whose output this step has been read (or hooked for its grad)
        # (kind, module) of the outputs and output gradients recorded once (watched): copied later from then on,
        # but for those a step changed in place, which are copied in the hook (see lensa.live.summaries)
        self._watched: set[tuple[str, str]] = set()
        self._grad_hooks: dict[str, Callable[..., None]] = {}  # module -> its output gradient's hook
        self._in_place: set[tuple[str, str]] = set()
        self._grads_seen: set[str] = set()  # modules whose output gradient this step has been read
        self._grads_read = False
        self._stepped = False
        self._update: list[tuple[str, torch.Tensor, Held | None]] | None = None  # weights held for the update
        self._grads_later = False  # this step's gradients are read after the optimizer's step
        self._shadow: IntendedUpdates | None = None  # for the narrow weights' intended updates
        self._intended: list[torch.Tensor | None] | None = None
        self._scale = float(scaler.get_scale()) if scaler is not None else None  # the scale this step uses

        self._handles: list[Any] = [model.register_forward_pre_hook(self._hook("forward", self._on_model_forward))]
        self._module_hooks = bool(plan.modules)
        for name, module in plan.modules:
            self._handles.append(module.register_forward_hook(self._hook("outputs", self._output_hook(name))))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._hook("optimizer", self._on_optimizer_pre)))
            self._handles.append(optimizer.register_step_post_hook(self._hook("optimizer", self._on_optimizer_post)))
        # Made now (a summary process starts while the caller sets up its loop); none when no step is recorded.
        recorded_any = self._steps is None or bool(self._steps)
        self._summary_sink = _summary_sink(self._run, background, recipes) if recorded_any else None

    # --- schedule ---------------------------------------------------------------------------------------

    def _is_recorded(self, step: int) -> bool:
        if self._steps is None:
            return step & (step - 1) == 0 and (self._powers is None or step < 2**self._powers)
        return step in self._steps

    @property
    def recorded_steps(self) -> tuple[int, ...] | None:
        """The steps that will be recorded (None: powers of two, as many as a file holds)."""
        return None if self._steps is None else tuple(sorted(self._steps))

    @property
    def recording(self) -> bool:
        """Whether the step in progress is recorded."""
        return self._recording

    @property
    def keeps_amax(self) -> bool:
        """Whether each tensor's amax is kept at every step (``amax=True``)."""
        return bool(self._amax_kinds)

    @property
    def rank(self) -> int:
        """This process's rank in the default process group (0 without one): rank 0 writes the run's file."""
        return self._rank

    def _want(self, kind: str) -> bool:
        return self._recording and kind in self._kinds and kind not in self._off and "summaries" not in self._off

    def _here(self, kind: str) -> bool:
        """Whether this rank summarises ``kind``: rank 0 the kinds every rank holds the same of, each rank its own."""
        return self._lead or kind not in SHARED_KINDS

    # --- failures -----------------------------------------------------------------------------------------

    def _fail(self, part: str, error: BaseException | str) -> None:
        """Switch ``part`` off and say so once (a kind, ``"amax"``, ``"summaries"`` or ``"step"``)."""
        if part in self._off:
            return
        self._off.add(part)
        self._off.update(_HOOK_PARTS.get(part, ()))
        what = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        doing, after = _PARTS.get(part, (part, "it is off"))
        warnings.warn(
            f"lensa Recorder: {doing} failed at step {self.current_step} ({what}); {after}. Training goes on, "
            "unchanged, and the rest is still recorded.",
            RecorderWarning,
            stacklevel=3,
        )

    def _hook(self, part: str, fn: Callable[..., Any]) -> Callable[..., None]:
        """``fn`` as a hook: outside torch.compile's graphs (:func:`_outside_graph`), and whatever it raises caught
        (``part`` and the kinds it reads switched off, :data:`_HOOK_PARTS`); it never returns a value that would
        replace a module's output or a gradient."""

        def guarded(*args: Any) -> None:
            if part in self._off:
                return
            try:
                fn(*args)
            except Exception as e:
                self._fail(part, e)

        return _outside_graph(functools.wraps(fn)(guarded))

    def _safely(self, part: str, fn: Callable[..., Any], *args: Any, always: bool = False) -> Any:
        """``fn(*args)``; a failure switches ``part`` off (:meth:`_fail`) instead of reaching the training loop.

        ``always``: run it even when ``part`` is off (a read that gathers sharded tensors: every rank must join the
        same gathers, whatever failed on one of them; ``fn`` then summarises only what is still on)."""
        if part in self._off and not always:
            return None
        try:
            return fn(*args)
        except Exception as e:
            self._fail(part, e)
            return None

    # --- reading tensors ------------------------------------------------------------------------------------

    @property
    def waited_seconds(self) -> float:
        """Seconds the training loop waited for the summary process to free room for its copies, or for its copying
        thread to finish the step's copies (0 inline)."""
        return 0.0 if self._summary_sink is None else self._summary_sink.waited

    @property
    def _summaries(self) -> InlineSummaries | ProcessSummaries:
        assert self._summary_sink is not None, "only a recorded step summarises, and then there is a sink"
        return self._summary_sink

    def _whole(
        self, ts: Sequence[torch.Tensor], like: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor] | None:
        """Each tensor whole: a DTensor gathered (``full_tensor()``, every rank joining), any other as it is; None on
        a rank other than 0, which summarises none of them (it only joins the gathers). A plain tensor standing for
        the shard of a DTensor of ``like`` (an intended update, worked out on the shard) is gathered as one."""
        dt: Any = self._dtensor
        if dt is None:
            return list(ts) if self._lead else None
        whole = []
        for i, t in enumerate(ts):
            shaped = like[i] if like is not None else t
            if isinstance(t, dt):
                t = t.full_tensor()
            elif isinstance(shaped, dt):
                t = dt.from_local(t, shaped.device_mesh, shaped.placements, shape=shaped.shape, stride=shaped.stride())
                t = t.full_tensor()
            whole.append(t)
        return whole if self._lead else None

    def _add(self, kind: str, name: str, values: torch.Tensor, scale: float | None = None) -> None:
        """Summarise a module's output or its gradient: copied later where this one has been watched once and did
        not change in place, else copied now (and watched, the first time)."""
        key = (kind, name)
        later = key in self._watched and key not in self._in_place
        watch = key not in self._watched
        self._watched.add(key)
        amax = kind in self._amax_kinds
        self._summaries.tensor(kind, name, self.current_step, values, scale, amax, later=later, watch=watch)

    def _check_copies(self, wait: bool = False) -> None:
        """The outputs and gradients copied so far that changed in place before they were checked: copied in the
        hook from now on; a record copied later is left out, and a warning says so."""
        sink = self._summaries
        sink.check(wait)
        if not sink.changes:
            return
        changes, sink.changes = sink.changes, []
        for kind, name, step, left_out in changes:
            self._in_place.add((kind, name))
            if left_out:
                what = {"activation": "output", "activation_grad": "output gradient"}.get(kind, kind)
                _warn_once(
                    f"in-place-{self._id}-{kind}-{name}",
                    f"lensa Recorder: the {what} of {name!r} changed in place during step {step} before its copy "
                    "was checked, so that record is left out; from now on it is copied in the hook, at once.",
                )

    def _keep_amax(self, kind: str, name: str, t: torch.Tensor, scale: float | None = None) -> None:
        """Queue the amax of ``t`` (divided by ``scale``) for this step; read at :meth:`step`, all at once. (Only
        where ``t`` is not summarised this step: a summarised tensor's amax is taken from the summary's own copy, by
        the summary process, and comes in with its record.)

        Kept as the tensor's largest and smallest value (two reductions that allocate nothing, where ``abs()``
        would write a copy of the tensor first); |x|'s largest is the larger of max and -min, taken for all the
        step's tensors at once in :meth:`_flush_amax`. A NaN propagates through both."""
        if kind in self._amax_kinds and "amax" not in self._off and t.numel():
            d = _local(t).detach()
            self._pending_amax.append((kind, name, d.amax(), d.amin(), scale))

    def _keep_amaxes(self, kind: str, names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
        """:meth:`_keep_amax` for a list of parameters or gradients, with one fused ``abs`` and ``max`` over them (each
        rank its own shard of a DTensor; rank 0 alone for tensors every rank holds the same of)."""
        if kind not in self._amax_kinds or "amax" in self._off or not (self._lead or self._dtensor is not None):
            return
        kept = [(n, _local(t).detach()) for n, t in zip(names, tensors, strict=True)]
        kept = [(n, t) for n, t in kept if t.numel()]
        if not kept:
            return
        with torch.no_grad():
            tops = torch._foreach_max(torch._foreach_abs([t for _, t in kept]))
        for (name, _), top in zip(kept, tops, strict=True):
            self._pending_amax.append((kind, name, top, None, None))

    def _flush_amax(self) -> None:
        pending, self._pending_amax = self._pending_amax, []
        if not pending or "amax" in self._off:
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

    # --- hooks ------------------------------------------------------------------------------------------

    def _on_model_forward(self, module: torch.nn.Module, args: Any) -> None:
        if self._started or not torch.is_grad_enabled():
            return
        self._started = True
        self._safely("weight", self._read_weights)

    def _read_weights(self) -> None:
        """This step's weights, before its update: summarised at a recorded step, else their amax (once a step)."""
        if self._weights_read:
            return
        self._weights_read = True
        if self._recording and "weight" in self._kinds:
            whole = self._whole(self._weights)  # every rank joins the gathers, whatever this rank summarises
            if self._want("weight") and whole is not None:  # the summaries take the amax from their copies
                amax = "weight" in self._amax_kinds
                self._summaries.tensors("weight", self._names, self.current_step, whole, amax=amax)
                return
        if not self._want("weight"):
            self._keep_amaxes("weight", self._names, self._weights)

    def _output_hook(self, name: str) -> Callable[[torch.nn.Module, Any, Any], None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not (self._recording or self._amax_kinds) or name in self._seen or not torch.is_grad_enabled():
                return
            self._hooks_ran = True
            if not self._started:  # the model's own forward was not called (Lightning's training_step calls a part)
                self._safely("forward", self._on_model_forward, module, args)
            self._seen.add(name)
            out = _first_tensor(output)
            if out is None or not out.is_floating_point():
                return
            out = _local(out)  # a DTensor output (tensor parallel): this rank's part, combined over ranks
            if self._want("activation"):
                self._safely("summaries", self._check_copies)
                self._safely("activation", self._add, "activation", name, out)
            else:
                self._safely("amax", self._keep_amax, "activation", name, out)
            if not out.requires_grad:
                return
            if self._want("activation_grad") or ("activation_grad" in self._amax_kinds and not self._recording):
                hook = self._grad_hooks.get(name)
                if hook is None:  # made once a module (wrapping a hook costs more than the rest of this one)
                    hook = self._grad_hooks[name] = self._hook("activation_grad", self._grad_hook(name))
                self._safely("activation_grad", out.register_hook, functools.partial(hook, self.current_step))

        return hook

    def _grad_hook(self, name: str) -> Callable[[int, torch.Tensor], None]:
        """The hook on the output gradient of module ``name``: given the step its output was hooked at."""

        def hook(step: int, grad: torch.Tensor) -> None:
            if step != self.current_step or name in self._grads_seen:
                return
            self._grads_seen.add(name)
            scaled = self._scaler is not None and self._scaler.is_enabled()
            scale = self._scale if scaled else None
            if self._want("activation_grad"):
                self._safely("summaries", self._check_copies)
                self._safely("activation_grad", self._add, "activation_grad", name, grad, scale)
            else:
                self._safely("amax", self._keep_amax, "activation_grad", name, grad, scale)

        return hook

    def _read_grads(self) -> None:
        recorded = self._recording and "weight_grad" in self._kinds
        if self._grads_read or not (recorded or "weight_grad" in self._amax_kinds):
            return
        self._grads_read = True
        names, grads = [], []
        for name, p in self._params:
            if p.grad is not None:
                names.append(name)
                grads.append(p.grad)
        if recorded:
            whole = self._whole(grads)  # every rank joins the gathers, whatever this rank summarises
            if self._want("weight_grad") and whole is not None:
                amax = "weight_grad" in self._amax_kinds
                self._summaries.tensors("weight_grad", names, self.current_step, whole, amax=amax)
                return
        if not self._want("weight_grad"):
            self._keep_amaxes("weight_grad", names, grads)

    def _on_optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not (self._recording or "weight_grad" in self._amax_kinds):
            return
        if self._recording and self._summary_sink is not None:  # the backward pass is done: its last copies are made
            self._safely("summaries", self._summary_sink.hand)  # while the optimizer steps
        if self._recording and not self._weights_read:  # no forward hook ran (see _read_weights): read them now
            self._safely("weight", self._read_weights, always=True)
        closure = any(callable(a) for a in args) or kwargs.get("closure") is not None  # args: (optimizer, ...)
        fused_unscale = isinstance(getattr(optimizer, "grad_scale", None), torch.Tensor)
        # With a closure (Lightning's loop, LBFGS) the backward pass has not run yet; with a fused optimizer that
        # GradScaler hands its scale to (grad_scale), the step itself unscales .grad. Either way: read them after.
        self._grads_later = closure or fused_unscale
        if not self._grads_later:
            self._safely("weight_grad", self._read_grads, always=True)
        self._update = None
        if self._recording and "update" in self._kinds:
            self._safely("update", self._hold_weights, optimizer, always=True)

    def _hold_weights(self, optimizer: torch.optim.Optimizer) -> None:
        """Before the step: every weight, held as it is, and for the weights of a narrow type what is needed for the
        update the optimizer means to make (:class:`IntendedUpdates`)."""
        narrow = [p for p in self._weights if p.dtype in _NARROW]
        intended = None
        if narrow and (self._lead or self._dtensor is not None) and self._want("update"):
            try:
                intended = IntendedUpdates(optimizer, narrow)
                if not self._grads_later:
                    self._intended = intended.compute()
            except Exception as e:
                intended = None
                self._intended_failed(optimizer, narrow, e)
        self._shadow = intended
        whole = self._whole(self._weights)  # every rank joins the gathers of sharded weights
        held = self._summaries.hold(whole) if whole is not None and self._want("update") else None
        self._update = [(n, p, None if held is None else held[i]) for i, (n, p) in enumerate(self._params)]

    def _intended_failed(self, optimizer: torch.optim.Optimizer, narrow: Sequence[torch.Tensor], e: Exception) -> None:
        self._shadow, self._intended = None, None
        _warn_once(
            f"intended-{type(optimizer).__name__}",
            f"lensa Recorder: the update {type(optimizer).__name__} means to make could not be worked out "
            f"({type(e).__name__}: {e}); the updates of its {dtype_name(narrow[0])} weights are recorded as "
            "after − before, which hides every update such a weight rounds away.",
        )

    def _on_optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # A fused optimizer stepped by GradScaler (found_inf set) runs its step always and skips inside it.
        found_inf = getattr(optimizer, "found_inf", None)
        skipped = isinstance(found_inf, torch.Tensor) and bool(found_inf.item() != 0)
        self._stepped = not skipped
        if self._recording or "weight_grad" in self._amax_kinds:
            # a closure made them, or the fused step unscaled them; the step leaves .grad be
            self._safely("weight_grad", self._read_grads, always=True)
        pending, self._update = self._update, None
        if pending is not None:
            self._safely("update", self._summarise_updates, optimizer, pending, skipped, always=True)

    def _summarise_updates(
        self, optimizer: torch.optim.Optimizer, pending: list[tuple[str, torch.Tensor, Held | None]], skipped: bool
    ) -> None:
        """After the step: each weight's update, from its copy before the step and its value now (or, for a narrow
        weight, the update the optimizer meant to make). Every rank joins the gathers of sharded tensors."""
        shadow, self._shadow = self._shadow, None
        intended, self._intended = self._intended, None
        try:
            if skipped:  # the weights did not change: no update
                return
            if shadow is not None and intended is None:
                try:
                    intended = shadow.compute()
                except Exception as e:
                    self._intended_failed(optimizer, shadow.params, e)
            by_param: dict[int, torch.Tensor] = {}
            if shadow is not None and intended is not None:
                for p, u in zip(shadow.params, intended, strict=True):
                    if u is not None:
                        by_param[id(p)] = u.to(torch.float32)
            moved = [(n, p, h) for n, p, h in pending if p.grad is not None]
            whole = self._whole([by_param.get(id(p), p) for _, p, _ in moved], like=[p for _, p, _ in moved])
            if whole is None or not self._want("update"):
                return
            updates = [
                Update(name, held, value, id(p) in by_param, dtype_name(p))
                for (name, p, held), value in zip(moved, whole, strict=True)
                if held is not None
            ]
            self._summaries.updates("update", self.current_step, updates)
        finally:
            if any(h is not None for _, _, h in pending):
                self._summaries.release_held()

    # --- the user's calls -------------------------------------------------------------------------------

    def step(self, loss: float | torch.Tensor | None = None) -> None:
        """End the current step: keep its loss (and, with a scaler, its loss scale and skip flag), move on.

        Call once per training step, after ``optimizer.step()`` / ``scaler.step(optimizer)`` and
        ``scaler.update()``. ``loss`` may be a tensor (read with ``float()``) or None (kept as NaN).
        """
        try:
            if self._recording or "weight_grad" in self._amax_kinds:
                self._safely("weight_grad", self._read_grads)  # a skipped step, or no optimizer: .grad as it is now
            self._safely("amax", self._flush_amax)
            self._safely("step", self._end_step, loss)
            if self._recording and self._summary_sink is not None and "summaries" not in self._off:
                self._safely("summaries", self._check_copies, True)  # every copy made later, done and checked
                self._safely("summaries", self._summary_sink.flush)  # the step's copies go to the summary process
            if self._recording and not self._hooks_ran and not self._started and self._weights_read:
                wanted = {"activation", "activation_grad"} & set(self._kinds)
                if wanted and self._module_hooks:
                    _warn_once(
                        f"no-hooks-{self._id}",
                        f"lensa Recorder: no module hook ran in recorded step {self.current_step}, so its "
                        "activations were not recorded. A model compiled with fullgraph=True runs no hook inside "
                        "it; one compiled and run before the Recorder was attached keeps its graph without the "
                        "hooks: attach the Recorder before the first compiled call (or call torch._dynamo.reset() "
                        "after attaching it).",
                    )
        finally:
            self.current_step += 1
            self._recording = self._is_recorded(self.current_step)
            if self._steps is None and self._powers is not None and self.current_step == 2**self._powers:
                _warn_once(
                    f"powers-{id(self)}",
                    f"lensa Recorder: a run file holds at most {MAX_TENSORS:,} records; steps from "
                    f"{self.current_step:,} on are not recorded (pass steps=... to choose which are).",
                )
            self._started = self._grads_read = self._stepped = self._weights_read = self._hooks_ran = False
            self._seen.clear()
            self._grads_seen.clear()
            self._update = self._shadow = self._intended = None
            self._pending_amax = []

    def _end_step(self, loss: float | torch.Tensor | None) -> None:
        value = math.nan if loss is None else float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        scale, skipped = None, False
        if self._scaler is not None and self._scale is not None and self._scaler.is_enabled():
            after = float(self._scaler.get_scale())
            scale = self._scale
            skipped = not self._stepped if self._optimizer is not None else after < scale
            self._scale = after
        self._run.record_step(self.current_step, value, scale, skipped)

    def read_gradients(self) -> None:
        """Read each parameter's ``.grad`` now, for this step's ``weight_grad`` (once a step; later calls do nothing).

        For loops that clear the gradients before the step ends: a skipped FP16 step never runs the optimizer's
        step hooks, so without this call its gradients would be read at :meth:`step`, after they are gone. Call it
        after ``scaler.step(optimizer)`` (which unscales them in place, steps or skips) and before ``zero_grad``.
        At a step that is not recorded only their amax is read (with ``amax=True``).
        """
        if self._recording or "weight_grad" in self._amax_kinds:
            self._safely("weight_grad", self._read_grads)

    def stats(self, wait: bool = True) -> RunStats:
        """This rank's run so far, every summary queued until now included (the same object each time; it grows).

        ``wait=False``: without waiting for the summaries still being made (the per-step scalars and amax are in at
        once). Never raises for what went wrong inside the Recorder: a tensor that could not be summarised is left
        out, and a :class:`RecorderWarning` says which kind was switched off.
        """
        if wait and self._summary_sink is not None and "summaries" not in self._off:
            self._safely("summaries", self._check_copies, True)  # a record left out is told of here, not lost quietly
            try:
                errors = self._summary_sink.drain()
            except Exception as e:
                self._fail("summaries", e)
            else:
                for kind, what in errors:
                    self._fail(kind if kind in KINDS else "summaries", what)
        return self._run

    def save(self, path: str | os.PathLike[str], *, timeout: float = DISTRIBUTED_SAVE_TIMEOUT_S) -> RunStats | None:
        """Write the run so far to ``path`` (a ``.npz`` file for :func:`lensa.runstats.load`), atomically; the run
        written, or None (on a rank other than 0, or when it could not be written: a warning says why).

        In a ``torch.distributed`` run call it on every rank: rank 0 writes the one file, with what every rank
        recorded (see the module's text); it waits at most ``timeout`` seconds for the others' parts.
        """
        try:
            run = self.stats()
            if self._world == 1:
                run.save(path)
                return run
            self._saves += 1
            key = f"lensa/{self._id}/{self._saves}"
            parts = _gather_on_rank_0(run.to_bytes(), key, self._rank, self._world, timeout)
            if parts is None:
                return None
            missing = [r for r, data in enumerate(parts) if data is None]
            if missing:
                _warn_once(
                    f"ranks-{self._id}-{self._saves}",
                    f"lensa Recorder: ranks {', '.join(map(str, missing))} did not hand over their part within "
                    f"{timeout:g} s (call save() on every rank); the file holds the other ranks' records.",
                )
            merged = merge_ranks([run] + [load(data) for data in parts[1:] if data is not None])
            merged.save(path)
            return merged
        except Exception as e:
            warnings.warn(
                f"lensa Recorder: the run could not be saved to {os.fspath(path)!r} ({type(e).__name__}: {e}).",
                RecorderWarning,
                stacklevel=2,
            )
            return None

    def close(self) -> None:
        """Remove every hook from the model and the optimizer, and finish the summaries still queued.

        The statistics stay available. Never raises: what went wrong while summarising is told as a warning.
        """
        for h in self._handles:
            try:
                h.remove()
            except Exception as e:  # a handle whose module is gone
                warnings.warn(f"lensa Recorder: a hook could not be removed ({e})", RecorderWarning, stacklevel=2)
        self._handles.clear()
        if self._summary_sink is not None:
            self.stats()
            try:
                for kind, what in self._summary_sink.close():
                    self._fail(kind if kind in KINDS else "summaries", what)
            except Exception as e:
                self._fail("summaries", e)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gather_on_rank_0(data: bytes, key: str, rank: int, world: int, timeout: float) -> list[bytes | None] | None:
    """Every rank's ``data`` on rank 0, through the process group's store (no collective: a rank that never calls
    this costs rank 0 ``timeout`` seconds, not a hang); None on the other ranks, which return at once.

    The list has one entry per rank (rank 0's own first); None for a rank that did not hand its part over in time.
    """
    from torch.distributed import distributed_c10d

    store = distributed_c10d._get_default_store()
    if rank != 0:
        store.set(f"{key}/{rank}", data)  # type: ignore[arg-type]  # c10d's Store.set takes bytes too (typed str)
        return None
    parts: list[bytes | None] = [data]
    for other in range(1, world):
        name = f"{key}/{other}"
        try:
            store.wait([name], timedelta(seconds=timeout))
            parts.append(bytes(store.get(name)))
            store.delete_key(name)
        except Exception:  # not there in time (or the store is gone): the file says without it
            parts.append(None)
    return parts


__all__ = [
    "DEFAULT_RECORDED_STEPS",
    "IntendedUpdates",
    "Recorder",
    "RecorderWarning",
    "log_spaced_steps",
    "summarize_tensor",
    "summarize_update_tensors",
]
