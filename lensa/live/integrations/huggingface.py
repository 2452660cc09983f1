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

from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lensa.live.integrations import DEFAULT_FILE as DEFAULT_FILE
from lensa.live.integrations import RecordingCallback, loss_of


class LensaCallback(RecordingCallback, TrainerCallback):
    """A ``TrainerCallback`` that records the run with a :class:`~lensa.live.capture.Recorder` and saves it at the end.

    ``path``: where the run is saved (default ``<output_dir>/lensa-run.npz``). ``steps``, ``kinds``, ``modules``,
    ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None`` (the default)
    records about 12 log-spaced steps of ``max_steps``. ``meta`` (JSON values) is stored with the run, beside
    what the callback adds itself (``"trainer": "transformers"``, ``fp16``, ``bf16``).

    After training, :attr:`path` is where the file went and :meth:`stats` gives the run.
    """

    _STARTED_BY = "trainer.train()"
    _loss_hook: Any = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        model: torch.nn.Module = kwargs["model"]
        wrapped = kwargs.get("optimizer")
        optimizer = getattr(wrapped, "optimizer", wrapped)  # accelerate's AcceleratedOptimizer holds the real one
        self._start(
            model,
            optimizer if isinstance(optimizer, torch.optim.Optimizer) else None,
            getattr(wrapped, "scaler", None),
            self._steps if self._steps is not None else max(int(state.max_steps), 1),
            {"trainer": "transformers", "fp16": bool(args.fp16), "bf16": bool(args.bf16)},
        )
        self._loss_hook = model.register_forward_hook(self._on_forward)
        self._default_path(args.output_dir or ".")

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
        self._finish(save=state.is_world_process_zero)

    def close(self) -> None:
        """Remove the hooks and finish the summaries (done at the end of training; safe to call again)."""
        if self._loss_hook is not None:
            self._loss_hook.remove()
            self._loss_hook = None
        super().close()
