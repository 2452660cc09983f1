"""One-line recording for the training loops people use: Hugging Face's ``Trainer`` and Lightning.

- :class:`lensa.live.integrations.huggingface.LensaCallback`, a ``transformers.TrainerCallback``::

      trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[LensaCallback("run.npz")])

- :class:`lensa.live.integrations.lightning.LensaCallback`, a Lightning ``Callback``::

      trainer = L.Trainer(max_steps=1000, precision="16-mixed", callbacks=[LensaCallback("run.npz")])

Each puts a :class:`lensa.live.capture.Recorder` on the model and its optimizer when training starts, ends a
Recorder step after every optimizer step (once per ``gradient_accumulation_steps`` / ``accumulate_grad_batches``
batches, as the library counts steps), and saves the run when training ends. A step's loss is the one the library
itself logs for it (the Trainer's ``loss``, the mean of a Lightning step's batches), with accumulation too; on
several ranks every rank records and the one file (written by rank 0) holds their mean, as the libraries log.
Nothing a callback does can stop the training: a failure inside it is told once as a
:class:`lensa.live.capture.RecorderWarning` and only that part stops. ``tensorboard=True`` writes, through the
library's own TensorBoard logger, each recorded step's shares rounded to 0 and overflowing in FP16, BF16 and FP8
(all layers of each kind together) and, with ``amax=True``, each kind's largest amax at every step.

With FP16 (``fp16=True``, ``precision="16-mixed"``) the library's own GradScaler goes to the Recorder, so the file
keeps the true (unscaled) gradients, the loss scale of every step and the skipped steps, as a hand-written loop
with a GradScaler does. The file has the same kinds and tensor names as a Recorder on the same model in a loop of
one's own, and opens on steps 2-5 and in ``python -m lensa report``.

Both share :class:`RecordingCallback`: the Recorder's options, the Recorder made when training starts, the run
saved when it ends. Each module imports its library (and torch) when imported itself; this package imports
neither.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lensa.runstats import KINDS

if TYPE_CHECKING:
    from lensa.live.capture import Recorder
    from lensa.runstats import RunStats

__all__ = ["DEFAULT_FILE", "TENSORBOARD_FORMATS", "RecordingCallback", "StepLoss", "loss_of", "tensorboard_scalars"]

DEFAULT_FILE = "lensa-run.npz"
TENSORBOARD_FORMATS: tuple[str, ...] = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def loss_of(output: Any) -> Any:
    """The loss tensor in a model's or training step's output (``.loss``, ``["loss"]``, the tensor itself) or None."""
    import torch

    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else None
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


class StepLoss:
    """One optimizer step's loss from its batches' losses, kept on the device until the step ends (one read a step):
    their mean, or with ``total``, their sum (the Trainer's ``training_step`` returns each batch's part of the step's
    loss already divided as it logs it)."""

    def __init__(self, total: bool = False) -> None:
        self._sum: Any = None
        self._n = 0
        self.total = total

    def add(self, loss: Any) -> None:
        if loss is None:
            return
        value = loss.detach().float()
        self._sum = value if self._sum is None else self._sum + value
        self._n += 1

    def take(self) -> float:
        """The mean (or sum) of the losses added since the last call (NaN when none was), and start again."""
        value = math.nan if self._sum is None else float(self._sum) / (1 if self.total else self._n)
        self._sum, self._n = None, 0
        return value


def tensorboard_scalars(run: RunStats, step: int) -> dict[str, float]:
    """What ``tensorboard=True`` writes for ``step``: where the step was recorded, per kind (all its layers together)
    the share of non-zero values that rounds to 0 and that overflows in each of :data:`TENSORBOARD_FORMATS`
    (``lensa/<kind>/<format>_zero``, ``..._overflow``; for updates the share a weight in the format would lose,
    ``lensa/update/<format>_lost``); and each kind's largest amax at the step (``lensa/amax/<kind>``), where one was
    kept. Shares are fractions 0..1; a share with no value to count is left out."""
    from lensa.runstats import measured

    out: dict[str, float] = {}
    for kind in run.kinds():
        if step not in run.steps(kind):
            continue
        stats = measured.tensor_stats(run, kind, measured.ALL_LAYERS, step)
        for fmt in TENSORBOARD_FORMATS:
            if kind == "update":
                if stats.lost_counts is not None:
                    out[f"lensa/update/{fmt}_lost"] = measured.lost_share(stats, fmt)
                continue
            shares = measured.zone_shares(stats, fmt)
            out[f"lensa/{kind}/{fmt}_zero"] = shares["zero"]
            out[f"lensa/{kind}/{fmt}_overflow"] = shares["overflow"]
    for kind in run.kinds() + [k for k in KINDS if k not in run.kinds()]:
        tops = []
        for name in run.amax_names(kind):
            steps, values = run.amax(kind, name)
            at = steps.searchsorted(step)
            if at < steps.size and steps[at] == step:
                tops.append(float(values[at]))
        if tops:
            out[f"lensa/amax/{kind}"] = max(tops)
    return {k: v for k, v in out.items() if math.isfinite(v) or math.isinf(v)}


class RecordingCallback:
    """What both callbacks do with a :class:`~lensa.live.capture.Recorder`, whatever the library's events.

    ``path``: where the run is saved (default: ``lensa-run.npz`` in the trainer's output folder). ``steps``,
    ``kinds``, ``modules``, ``background``, ``amax`` and ``recipes`` go to the Recorder (see there); ``steps=None``
    (the default) lets the trainer's step count choose. ``meta`` (JSON values) is stored with the run, beside
    what the callback adds itself. ``tensorboard``: write :func:`tensorboard_scalars` through the library's own
    TensorBoard logger (rank 0's; a step that is not recorded at once, a recorded one once its summaries are in:
    a step later, the last one at once). After training, :attr:`path` is where the file went and :meth:`stats`
    gives the run (on rank 0, every rank's).
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
        tensorboard: bool = False,
    ) -> None:
        super().__init__()
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:  # told now, where the callback is made, rather than when training starts
            raise ValueError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
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
        self._tensorboard = tensorboard
        self._to_log: list[int] = []  # recorded steps whose scalars are not written yet
        self._failed: set[str] = set()

    def _start(
        self, model: Any, optimizer: Any, scaler: Any, steps: int | Iterable[int] | None, meta: Mapping[str, Any]
    ) -> None:
        """Put a Recorder on ``model`` and ``optimizer`` (None: no updates recorded) at ``steps``; ``scaler`` goes
        to it when it is a GradScaler. ``meta`` (the callback's own) comes before the user's."""
        import torch

        from lensa.live.capture import Recorder

        self.close()
        self._to_log = []
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

    def _safely(self, event: str, fn: Any, *args: Any, stop: bool = False) -> Any:
        """``fn(*args)`` for one of the library's events; a failure is told once and never raised into the library's
        loop. ``stop``: a failure there ends the recording (the hooks are removed: where training starts, nothing is
        set up; at the end, nothing more is to come); elsewhere only that event's work is lost."""
        try:
            return fn(*args)
        except Exception as e:
            if event not in self._failed:
                from lensa.live.capture import RecorderWarning

                self._failed.add(event)
                then = "recording stops here" if stop else "this step's part of it is lost, recording goes on"
                warnings.warn(
                    f"lensa {type(self).__name__}: {event} failed ({type(e).__name__}: {e}); {then}, training goes on.",
                    RecorderWarning,
                    stacklevel=2,
                )
            if stop:
                with contextlib.suppress(Exception):  # already told; close() never raises for the hooks
                    self.close()
            return None

    def _tell_once(self, what: str) -> None:
        if what not in self._failed:
            from lensa.live.capture import RecorderWarning

            self._failed.add(what)
            warnings.warn(f"lensa {type(self).__name__}: {what}.", RecorderWarning, stacklevel=3)

    def _end_step(self, write: Any = None, last: bool = False) -> None:
        """The Recorder's step, with this step's loss; with ``tensorboard``, the scalars of what is in (``write``:
        the library's own writer, ``write(step, scalars)``, or None where there is none on this rank)."""
        recorder = self._recorder
        if recorder is None:
            return
        step = recorder.current_step
        recorded = recorder.recording
        recorder.step(loss=self._loss.take())
        if not self._tensorboard or write is None:
            return
        self._safely("writing to TensorBoard", self._write_tensorboard, recorder, step, recorded, last, write)

    def _write_tensorboard(self, recorder: Recorder, step: int, recorded: bool, last: bool, write: Any) -> None:
        # A recorded step's summaries (and the amax they take) come in from the summary process a step later.
        ready, self._to_log = self._to_log, ([step] if recorded and not last else [])
        now = [] if recorded and not last else [step]
        if ready or (now and (recorder.keeps_amax or recorded)):
            run = recorder.stats(wait=bool(ready) or recorded)
            for s in [*ready, *now]:
                scalars = tensorboard_scalars(run, s)
                if scalars:
                    write(s, scalars)

    def _finish(self, write: Any = None) -> None:
        """End the recording and save the run to :attr:`path` (every rank calls it; rank 0 writes the file)."""
        if self._recorder is None:
            return
        recorder = self._recorder
        if self._tensorboard and write is not None and self._to_log:
            so_far = recorder.stats()
            for s in self._to_log:
                write(s, tensorboard_scalars(so_far, s))
            self._to_log = []
        saved: RunStats | None = None
        if self.path is not None:
            if recorder.rank == 0:
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            saved = recorder.save(self.path)
        self.close()
        self._run = recorder.stats() if saved is None else saved

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
