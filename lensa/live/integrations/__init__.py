"""One-line recording for the training loops people use: Hugging Face's ``Trainer`` and Lightning.

- :class:`lensa.live.integrations.huggingface.LensaCallback`, a ``transformers.TrainerCallback``::

      trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[LensaCallback("run.npz")])

- :class:`lensa.live.integrations.lightning.LensaCallback`, a Lightning ``Callback``::

      trainer = L.Trainer(max_steps=1000, precision="16-mixed", callbacks=[LensaCallback("run.npz")])

Each puts a :class:`lensa.live.capture.Recorder` on the model and its optimizer when training starts, ends a
Recorder step after every optimizer step (once per ``gradient_accumulation_steps`` / ``accumulate_grad_batches``
batches, as the library counts steps), and saves the run when training ends. With FP16 (``fp16=True``,
``precision="16-mixed"``) the library's own GradScaler goes to the Recorder, so the file keeps the true
(unscaled) gradients, the loss scale of every step and the skipped steps, as a hand-written loop with a
GradScaler does. The file has the same kinds and tensor names as a Recorder on the same model in a loop of
one's own, and opens on steps 2-5 and in ``python -m lensa report``.

Both share :class:`RecordingCallback`: the Recorder's options, the Recorder made when training starts, the run
saved when it ends. Each module imports its library (and torch) when imported itself; this package imports
neither.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lensa.runstats import KINDS

if TYPE_CHECKING:
    from lensa.live.capture import Recorder
    from lensa.runstats import RunStats

__all__ = ["DEFAULT_FILE", "RecordingCallback", "StepLoss", "loss_of"]

DEFAULT_FILE = "lensa-run.npz"


def loss_of(output: Any) -> Any:
    """The loss tensor in a model's or training step's output (``.loss``, ``["loss"]``, the tensor itself) or None."""
    import torch

    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else None
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


class StepLoss:
    """The mean loss of one optimizer step's batches, kept on the device until the step ends (one read a step)."""

    def __init__(self) -> None:
        self._sum: Any = None
        self._n = 0

    def add(self, loss: Any) -> None:
        if loss is None:
            return
        value = loss.detach().float()
        self._sum = value if self._sum is None else self._sum + value
        self._n += 1

    def take(self) -> float:
        """The mean of the losses added since the last call (NaN when none was), and start again."""
        mean = math.nan if self._sum is None else float(self._sum) / self._n
        self._sum, self._n = None, 0
        return mean


class RecordingCallback:
    """What both callbacks do with a :class:`~lensa.live.capture.Recorder`, whatever the library's events.

    ``path``: where the run is saved (default: ``lensa-run.npz`` in the trainer's output folder). ``steps``,
    ``kinds``, ``modules``, ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None``
    (the default) lets the trainer's step count choose. ``meta`` (JSON values) is stored with the run, beside
    what the callback adds itself. After training, :attr:`path` is where the file went and :meth:`stats` gives
    the run.
    """

    _STARTED_BY = "training"
    """The call that starts recording, for the message of :meth:`stats` before it."""

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

    def _start(
        self, model: Any, optimizer: Any, scaler: Any, steps: int | Iterable[int] | None, meta: Mapping[str, Any]
    ) -> None:
        """Put a Recorder on ``model`` and ``optimizer`` (None: no updates recorded) at ``steps``; ``scaler`` goes
        to it when it is a GradScaler. ``meta`` (the callback's own) comes before the user's."""
        import torch

        from lensa.live.capture import Recorder

        self.close()
        self._recorder = Recorder(
            model,
            optimizer,
            steps=steps,
            scaler=scaler if isinstance(scaler, torch.amp.GradScaler) else None,
            kinds=[k for k in self._kinds if k != "update" or optimizer is not None],
            modules=self._modules,
            meta={**meta, **self._meta},
            background=self._background,
            amax=self._amax,
            recipes=self._recipes,
        )
        self._run = None

    def _default_path(self, folder: str) -> None:
        if self.path is None:
            self.path = os.path.join(folder, DEFAULT_FILE)

    def _finish(self, save: bool) -> None:
        """End the recording; ``save`` (this process writes files) saves the run to :attr:`path`."""
        if self._recorder is None:
            return
        run = self._recorder.stats()
        self.close()
        self._run = run
        if save and self.path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            run.save(self.path)

    def stats(self) -> RunStats:
        """The run recorded so far (during training) or the finished one (after it)."""
        if self._recorder is not None:
            return self._recorder.stats()
        if self._run is None:
            raise RuntimeError(f"nothing recorded yet: the callback records from the start of {self._STARTED_BY}")
        return self._run

    def close(self) -> None:
        """Remove the hooks and finish the summaries (done at the end of training; safe to call again)."""
        if self._recorder is not None:
            recorder, self._recorder = self._recorder, None
            recorder.close()
