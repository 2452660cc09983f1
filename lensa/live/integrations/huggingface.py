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
- every micro-batch: what the Trainer's ``training_step`` returns is kept (on the device). That is the batch's part
  of the step's loss exactly as the Trainer adds it up for its own ``loss`` log (divided for gradient accumulation,
  or normalised by the tokens of the whole accumulated batch), so a step's loss is their sum: the number the
  Trainer logs for that step (the mean over the ranks, on several). The callback finds the Trainer that calls it
  and wraps that one method of it while training runs; where it cannot (a loop that calls the callback itself), the
  mean of the model's own ``loss`` outputs is kept instead.
- ``on_optimizer_step``: the gradients are read, after ``scaler.step`` unscaled them and before the Trainer's
  ``model.zero_grad()``, so a skipped FP16 step keeps its gradients too.
- ``on_step_end`` (after the optimizer, the scaler's update and the learning-rate step): the Recorder's step; with
  ``tensorboard=True`` the scalars, through the Trainer's own ``TensorBoardCallback`` (``report_to=["tensorboard"]``).
- ``on_train_end``: every rank hands its records over and rank 0 saves the one file; the hooks are removed.

Accelerate makes a GradScaler only for an accelerator device: ``fp16=True`` on the CPU autocasts to FP16 with no
scaler, and the file then has no loss-scale history (as a hand-written CPU loop without a scaler would).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lensa.live.integrations import DEFAULT_FILE as DEFAULT_FILE
from lensa.live.integrations import RecordingCallback, loss_of


def _calling_trainer() -> Trainer | None:
    """The Trainer whose event is being handled: the nearest ``self`` up the call stack that is one."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            found = frame.f_locals.get("self")
            if isinstance(found, Trainer):
                return found
            frame = frame.f_back
    finally:
        del frame
    return None


class LensaCallback(RecordingCallback, TrainerCallback):
    """A ``TrainerCallback`` that records the run with a :class:`~lensa.live.capture.Recorder` and saves it at the end.

    ``path``: where the run is saved (default ``<output_dir>/lensa-run.npz``). ``steps``, ``kinds``, ``modules``,
    ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None`` (the default)
    records about 12 log-spaced steps of ``max_steps``. ``meta`` (JSON values) is stored with the run, beside
    what the callback adds itself (``"trainer": "transformers"``, ``fp16``, ``bf16``). ``tensorboard=True`` writes
    the per-step shares and amax through the Trainer's TensorBoard logger.

    After training, :attr:`path` is where the file went and :meth:`stats` gives the run.
    """

    _STARTED_BY = "trainer.train()"
    _loss_hook: Any = None
    _trainer: Trainer | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._safely("on_train_begin", self._begin, args, state, kwargs, stop=True)

    def _begin(self, args: TrainingArguments, state: TrainerState, kwargs: dict[str, Any]) -> None:
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
        self._default_path(args.output_dir or ".")
        trainer = _calling_trainer()
        if trainer is None:  # the model's own loss outputs, their mean per step
            self._loss.total = False
            self._loss_hook = model.register_forward_hook(self._on_forward)
            return
        self._loss.total = True
        self._trainer = trainer
        training_step = trainer.training_step

        def recorded_training_step(*a: Any, **kw: Any) -> Any:
            loss = training_step(*a, **kw)
            with contextlib.suppress(Exception):  # a loss that is not a tensor: NaN for the step, training goes on
                self._loss.add(loss if isinstance(loss, torch.Tensor) else None)
            return loss

        trainer.training_step = recorded_training_step  # type: ignore[method-assign]  # this Trainer, while it trains

    def _on_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if module.training and torch.is_grad_enabled():
            self._safely("reading the loss", self._loss.add, loss_of(output))

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._recorder is not None:
            self._safely("on_optimizer_step", self._recorder.read_gradients)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        last = state.max_steps > 0 and state.global_step >= state.max_steps
        self._safely("on_step_end", self._end_step, self._writer(), last)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._safely("on_train_end", self._finish, self._writer(), stop=True)

    def _writer(self) -> Any:
        """``write(step, scalars)`` through the Trainer's TensorBoardCallback's writer; None where there is none."""
        if not self._tensorboard or self._trainer is None:
            return None
        from transformers.integrations.integration_utils import TensorBoardCallback

        tb = next((c for c in self._trainer.callback_handler.callbacks if isinstance(c, TensorBoardCallback)), None)
        writer = getattr(tb, "tb_writer", None)
        if writer is None:
            if tb is None and self._trainer.is_world_process_zero():
                self._tell_once(
                    "tensorboard=True writes through the Trainer's TensorBoard logger: add "
                    "report_to=['tensorboard'] to the TrainingArguments"
                )
            return None

        def write(step: int, scalars: dict[str, float]) -> None:
            for tag, value in scalars.items():
                writer.add_scalar(tag, value, step)
            writer.flush()

        return write

    def close(self) -> None:
        """Remove the hooks and finish the summaries (done at the end of training; safe to call again)."""
        if self._loss_hook is not None:
            self._loss_hook.remove()
            self._loss_hook = None
        if self._trainer is not None:
            self._trainer.__dict__.pop("training_step", None)  # the Trainer's own method again
            self._trainer = None
        super().close()
