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
  mean loss of its batches. Lightning's mixed precision plugin has by then unscaled the gradients, stepped or
  skipped, and updated the scale; the gradients are still there (Lightning clears them before the next
  backward pass, not after the step).
- ``on_train_end``: the run is saved (by global rank 0 only) and the hooks are removed; ``on_exception``
  removes the hooks too.

Manual optimisation (``automatic_optimization = False``) is recorded the same way: one Recorder step for each
batch in which ``global_step`` moved (the first optimizer's ``.grad`` and updates are read at its own step).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import lightning as L
import torch

from lensa.live.capture import Recorder
from lensa.live.integrations import StepLoss, loss_of
from lensa.runstats import KINDS, RunStats

DEFAULT_FILE = "lensa-run.npz"


class LensaCallback(L.Callback):
    """A Lightning ``Callback`` that records the run with a :class:`~lensa.live.capture.Recorder` and saves it.

    ``path``: where the run is saved (default ``<default_root_dir>/lensa-run.npz``). ``steps``, ``kinds``,
    ``modules``, ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None`` (the
    default) records about 12 log-spaced steps of the trainer's estimated optimizer steps. ``meta`` (JSON values)
    is stored with the run, beside what the callback adds (``"trainer": "lightning"``, ``precision``).

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
        super().__init__()
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
        self._global_step = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        optimizers = list(trainer.optimizers)
        optimizer = optimizers[0] if optimizers else None
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        meta = {"trainer": "lightning", "precision": str(trainer.precision), **self._meta}
        steps = self._steps
        if steps is None:
            estimated = trainer.estimated_stepping_batches
            steps = int(estimated) if estimated != float("inf") else None  # no end known: powers of two
        self.close()
        self._recorder = Recorder(
            pl_module,
            optimizer,
            steps=steps,
            scaler=scaler if isinstance(scaler, torch.amp.GradScaler) else None,
            kinds=[k for k in self._kinds if k != "update" or optimizer is not None],
            modules=self._modules,
            meta=meta,
            background=self._background,
            amax=self._amax,
            recipes=self._recipes,
        )
        self._run = None
        self._global_step = trainer.global_step
        if self.path is None:
            self.path = os.path.join(trainer.default_root_dir, DEFAULT_FILE)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._recorder is None:
            return
        self._loss.add(loss_of(outputs))
        if trainer.global_step != self._global_step:  # an optimizer step ended with this batch
            self._global_step = trainer.global_step
            self._recorder.step(loss=self._loss.take())

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._recorder is None:
            return
        run = self._recorder.stats()
        self.close()
        self._run = run
        if trainer.is_global_zero and self.path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            run.save(self.path)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.close()

    def stats(self) -> RunStats:
        """The run recorded so far (during training) or the finished one (after it)."""
        if self._recorder is not None:
            return self._recorder.stats()
        if self._run is None:
            raise RuntimeError("nothing recorded yet: the callback records from the start of trainer.fit()")
        return self._run

    def close(self) -> None:
        """Remove the hooks and finish the summaries (done at the end of training; safe to call again)."""
        if self._recorder is not None:
            recorder, self._recorder = self._recorder, None
            recorder.close()
