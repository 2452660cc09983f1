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

Each module imports its library (and torch) when imported itself; this package imports neither.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["StepLoss", "loss_of"]


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
