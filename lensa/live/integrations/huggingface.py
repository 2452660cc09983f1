"""Record a Hugging Face ``Trainer`` run for Lensa: one callback, the file saved when training ends.

::

    from lensa.live.integrations.huggingface import LensaCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[LensaCallback("run.npz")])
    trainer.train()                                  # run.npz written at the end; open it on step 2

What happens where (Trainer's own events, transformers 5):

- ``on_train_begin``: a :class:`lensa.live.capture.Recorder` on ``trainer.model`` (the unwrapped model, so the
  tensor names are ``named_parameters()``'s) and the optimizer inside accelerate's wrapper; with ``fp16=True``
  on a GPU, accelerate's GradScaler too (the wrapper holds it as ``optimizer.scaler``). Without ``steps=`` the
  run's ``max_steps`` gives about 12 log-spaced recorded steps, the last included.
- every forward pass in training: the ``loss`` of the model's output is kept (on the device); a step's loss is
  the mean over its micro-batches (NaN when the model returns none, e.g. a ``compute_loss`` of one's own).
- ``on_optimizer_step``: the gradients are read, after ``scaler.step`` unscaled them and before the Trainer's
  ``model.zero_grad()``, so a skipped FP16 step keeps its gradients too.
- ``on_step_end`` (after the optimizer, the scaler's update and the learning-rate step): the Recorder's step.
- ``on_train_end``: the run is saved (by the main process only) and the hooks are removed.

Accelerate makes a GradScaler only for an accelerator device: ``fp16=True`` on the CPU autocasts to FP16 with no
scaler, and the file then has no loss-scale history (as a hand-written CPU loop without a scaler would).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lensa.live.capture import Recorder
from lensa.live.integrations import StepLoss, loss_of
from lensa.runstats import KINDS, RunStats

DEFAULT_FILE = "lensa-run.npz"


class LensaCallback(TrainerCallback):
    """A ``TrainerCallback`` that records the run with a :class:`~lensa.live.capture.Recorder` and saves it at the end.

    ``path``: where the run is saved (default ``<output_dir>/lensa-run.npz``). ``steps``, ``kinds``, ``modules``,
    ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None`` (the default)
    records about 12 log-spaced steps of ``max_steps``. ``meta`` (JSON values) is stored with the run, beside
    what the callback adds itself (``"trainer": "transformers"``, ``fp16``, ``bf16``).

    After training, :attr:`path` is where the file went and :meth:`stats` gives the run.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        steps: int | Iterable[int] | None = None,
        kinds: Iterable[str] = KINDS,
        modules: Iterable[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        background: bool = True,
        amax: bool = False,
        recipes: bool = False,
    ) -> None:
        self.path: str | None = None if path is None else os.fspath(path)
        self._steps = steps
        self._kinds = tuple(kinds)
        self._modules = None if modules is None else tuple(modules)
        self._meta = dict(meta or {})
        self._background = background
        self._amax, self._recipes = amax, recipes
        self._recorder: Recorder | None = None
        self._run: RunStats | None = None
        self._loss = StepLoss()
        self._loss_hook: Any = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        model: torch.nn.Module = kwargs["model"]
        wrapped = kwargs.get("optimizer")
        optimizer = getattr(wrapped, "optimizer", wrapped)  # accelerate's AcceleratedOptimizer holds the real one
        scaler = getattr(wrapped, "scaler", None)
        meta = {"trainer": "transformers", "fp16": bool(args.fp16), "bf16": bool(args.bf16), **self._meta}
        steps = self._steps if self._steps is not None else max(int(state.max_steps), 1)
        self.close()
        self._recorder = Recorder(
            model,
            optimizer if isinstance(optimizer, torch.optim.Optimizer) else None,
            steps=steps,
            scaler=scaler if isinstance(scaler, torch.amp.GradScaler) else None,
            kinds=[k for k in self._kinds if k != "update" or isinstance(optimizer, torch.optim.Optimizer)],
            modules=self._modules,
            meta=meta,
            background=self._background,
            amax=self._amax,
            recipes=self._recipes,
        )
        self._run = None
        self._loss_hook = model.register_forward_hook(self._on_forward)
        if self.path is None:
            self.path = os.path.join(args.output_dir or ".", DEFAULT_FILE)

    def _on_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if module.training and torch.is_grad_enabled():
            self._loss.add(loss_of(output))

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._recorder is not None:
            self._recorder.read_gradients()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self._recorder is not None:
            self._recorder.step(loss=self._loss.take())

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._recorder is None:
            return
        run = self._recorder.stats()
        self.close()
        self._run = run
        if state.is_world_process_zero and self.path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            run.save(self.path)

    def stats(self) -> RunStats:
        """The run recorded so far (during training) or the finished one (after it)."""
        if self._recorder is not None:
            return self._recorder.stats()
        if self._run is None:
            raise RuntimeError("nothing recorded yet: the callback records from the start of trainer.train()")
        return self._run

    def close(self) -> None:
        """Remove the hooks and finish the summaries (done at the end of training; safe to call again)."""
        if self._loss_hook is not None:
            self._loss_hook.remove()
            self._loss_hook = None
        if self._recorder is not None:
            recorder, self._recorder = self._recorder, None
            recorder.close()
