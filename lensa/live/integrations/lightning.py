"""Record a Lightning run for Lensa: one callback, the file saved when training ends.

::

    import lightning as L
    from lensa.live.integrations.lightning import LensaCallback

    trainer = L.Trainer(max_steps=1000, precision="16-mixed", callbacks=[LensaCallback("run.npz")])
    trainer.fit(module, data)                        # run.npz written at the end; open it on step 2

What happens where (Lightning 2's own hooks, automatic optimisation):

- ``on_train_start``: a :class:`lensa.live.capture.Recorder` on the LightningModule (its tensors are named as its
  ``named_parameters()`` names them, ``model.layer.0.weight`` for a network kept as ``self.model``), its first
  optimizer, and with ``precision="16-mixed"`` the precision plugin's GradScaler. Without ``steps=`` the
  trainer's ``estimated_stepping_batches`` gives about 12 log-spaced recorded steps, the last included.
- ``on_train_batch_end``: the training step's loss is kept; when the trainer's ``global_step`` has moved (an
  optimizer step happened: once per ``accumulate_grad_batches`` batches) the Recorder's step ends, with the
  mean loss of its batches (Lightning hands the callback each batch's loss divided by ``accumulate_grad_batches``,
  so the step's loss is their sum: the mean of what ``training_step`` returned, the number a
  ``self.log("loss", loss)`` averages; on several ranks the file holds the mean over the ranks, as
  ``sync_dist=True`` logs it). Lightning's mixed precision plugin has by then unscaled the gradients, stepped or
  skipped, and updated the scale; the gradients are still there (Lightning clears them before the next
  backward pass, not after the step).
- ``on_train_end``: every rank hands its records over, rank 0 saves the one file, and the hooks are removed;
  ``on_exception`` removes the hooks too. With ``tensorboard=True`` the scalars go to the trainer's own loggers
  (``logger.log_metrics``: its TensorBoardLogger, and any other it has).

Manual optimisation (``automatic_optimization = False``) is recorded the same way: one Recorder step for each
batch in which ``global_step`` moved (the first optimizer's ``.grad`` and updates are read at its own step).
"""

from __future__ import annotations

from typing import Any

import lightning as L

from lensa.live.integrations import DEFAULT_FILE as DEFAULT_FILE
from lensa.live.integrations import RecordingCallback, loss_of


class LensaCallback(RecordingCallback, L.Callback):
    """A Lightning ``Callback`` that records the run with a :class:`~lensa.live.capture.Recorder` and saves it.

    ``path``: where the run is saved (default ``<default_root_dir>/lensa-run.npz``). ``steps``, ``kinds``,
    ``modules``, ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None`` (the
    default) records about 12 log-spaced steps of the trainer's estimated optimizer steps. ``meta`` (JSON values)
    is stored with the run, beside what the callback adds (``"trainer": "lightning"``, ``precision``).
    ``tensorboard=True`` writes the per-step shares and amax through the trainer's loggers.

    After training, :attr:`path` is where the file went and :meth:`stats` gives the run.
    """

    _STARTED_BY = "trainer.fit()"
    _global_step = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._safely("on_train_start", self._begin, trainer, pl_module, stop=True)

    def _begin(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        optimizers = list(trainer.optimizers)
        steps = self._steps
        if steps is None:
            estimated = trainer.estimated_stepping_batches
            steps = int(estimated) if estimated != float("inf") else None  # no end known: powers of two
        self._start(
            pl_module,
            optimizers[0] if optimizers else None,
            getattr(trainer.precision_plugin, "scaler", None),
            steps,
            {"trainer": "lightning", "precision": str(trainer.precision)},
        )
        self._global_step = trainer.global_step
        # automatic optimisation hands over each batch's loss already divided by accumulate_grad_batches
        self._loss.total = bool(pl_module.automatic_optimization)
        self._default_path(trainer.default_root_dir)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._recorder is None:
            return
        self._safely("reading the loss", self._loss.add, loss_of(outputs))
        if trainer.global_step != self._global_step:  # an optimizer step ended with this batch
            self._global_step = trainer.global_step
            last = trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
            self._safely("on_train_batch_end", self._end_step, self._writer(trainer), last)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._safely("on_train_end", self._finish, self._writer(trainer), stop=True)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._safely("on_exception", self.close, stop=True)

    def _writer(self, trainer: L.Trainer) -> Any:
        """``write(step, scalars)`` through the trainer's loggers (each one's ``log_metrics``); None without any."""
        if not self._tensorboard:
            return None
        loggers = list(trainer.loggers)
        if not any(type(lg).__name__ == "TensorBoardLogger" for lg in loggers) and trainer.is_global_zero:
            self._tell_once(
                "tensorboard=True writes through the trainer's loggers, and it has no TensorBoardLogger "
                "(pass logger=TensorBoardLogger(...), or install tensorboard for Lightning's default one)"
            )
        if not loggers:
            return None

        def write(step: int, scalars: dict[str, float]) -> None:
            for lg in loggers:
                lg.log_metrics(scalars, step=step)

        return write
