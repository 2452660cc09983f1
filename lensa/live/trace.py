"""The GradScaler trace: a real FP16 run with a real ``torch.amp.GradScaler`` and an overflow you can provoke."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lensa.live.config import RunConfig
from lensa.live.device import resolve_device
from lensa.live.errors import LiveError
from lensa.live.slot import run_slot
from lensa.live.task import _build_mlp, _initial_state, _make_data
from lensa.live.torch_utils import _oom_as_live_error


@dataclass(frozen=True)
class TraceStep:
    """One step of :func:`gradscaler_trace`.

    ``scale``: the loss scale used for this step's backward pass;
    ``scale_after``: the scale after ``scaler.update()``. ``found_inf``: some
    unscaled gradient was inf or NaN (checked directly on the gradients);
    ``skipped``: the optimizer did not step (seen by an optimizer step hook).
    ``loss``: the unscaled training loss (FP32), before any spike;
    ``spiked``: this step's loss was multiplied by the spike factor;
    ``max_abs_grad``: largest |gradient| after unscaling (inf or nan when it
    overflowed).
    """

    step: int
    scale: float
    found_inf: bool
    skipped: bool
    scale_after: float
    loss: float
    spiked: bool
    max_abs_grad: float


TRACE_LIMITS: dict[str, tuple[float, float]] = {
    "steps": (1, 200),
    "init_scale": (1.0, 2.0**64),
    "growth_interval": (1, 2000),
    "spike_factor": (1.0, 1e12),
    "lr": (1e-6, 1.0),
}


def gradscaler_trace(
    steps: int = 24,
    *,
    init_scale: float = 2.0**16,
    growth_interval: int = 3,
    spike_steps: Sequence[int] = (12,),
    spike_factor: float = 1e4,
    lr: float = 1e-3,
    seed: int = 0,
    device: str = "auto",
) -> list[TraceStep]:
    """A real FP16 autocast run with a real ``torch.amp.GradScaler`` and overflow you can provoke.

    A small MLP (16 inputs, 2 hidden layers of 64, batch 64) trains in FP16
    autocast. Overflow is real: the gradients of the FP16 matmuls are FP16,
    so once ``scale`` times a gradient passes 65504 it becomes inf. Two ways
    to provoke it: a large ``init_scale`` (the first steps overflow until the
    scale has halved enough), and ``spike_steps`` (1-based) whose loss is
    multiplied by ``spike_factor``, like a bad batch. A short
    ``growth_interval`` (PyTorch's default is 2000) shows the scale doubling
    after that many clean steps. The result matches
    :func:`lensa.models.scaling.simulate` fed the ``found_inf`` pattern. Takes well
    under a second on a CPU. Holds the run slot.
    """
    values = {"steps": steps, "init_scale": init_scale, "growth_interval": growth_interval}
    values |= {"spike_factor": spike_factor, "lr": lr}
    for name, value in values.items():
        lo, hi = TRACE_LIMITS[name]
        whole = name in ("steps", "growth_interval")
        ok = isinstance(value, int) if whole else isinstance(value, int | float) and math.isfinite(value)
        if isinstance(value, bool) or not ok or not lo <= value <= hi:
            raise LiveError("invalid", f"{name} must be between {lo:g} and {hi:g} (got {value!r}).")
    spikes = set(spike_steps)
    if any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= steps for s in spikes):
        raise LiveError("invalid", f"spike_steps must be step numbers from 1 to {steps} (got {tuple(spike_steps)!r}).")
    dev = resolve_device(device)
    with run_slot(), _oom_as_live_error(dev, "the GradScaler trace"):
        return _trace(steps, init_scale, growth_interval, spikes, spike_factor, lr, seed, dev)


def _trace(
    steps: int,
    init_scale: float,
    growth_interval: int,
    spikes: set[int],
    spike_factor: float,
    lr: float,
    seed: int,
    device: str,
) -> list[TraceStep]:
    import torch

    cfg = RunConfig(width=64, depth=2, batch_size=64, features=16, seed=seed, device=device)
    gen = torch.Generator().manual_seed(seed)
    x, y = (t.to(device) for t in _make_data(cfg.batch_size, cfg.features, gen))
    model = _build_mlp(cfg.features, cfg.width, cfg.depth)
    model.load_state_dict(_initial_state(cfg))
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    stepped: list[int] = []
    hook = opt.register_step_post_hook(lambda *_: stepped.append(1))
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_interval=growth_interval)
    criterion = torch.nn.BCEWithLogitsLoss()
    out = []
    try:
        for i in range(1, steps + 1):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device, dtype=torch.float16):
                loss = criterion(model(x), y)
            spiked = i in spikes
            used = float(scaler.get_scale())
            scaler.scale(loss * spike_factor if spiked else loss).backward()
            scaler.unscale_(opt)
            grads = [p.grad.detach().abs().max() for p in model.parameters() if p.grad is not None]
            biggest = float(torch.stack(grads).max()) if grads else 0.0
            found = not math.isfinite(biggest)
            before = len(stepped)
            scaler.step(opt)
            scaler.update()
            out.append(
                TraceStep(
                    step=i,
                    scale=used,
                    found_inf=found,
                    skipped=len(stepped) == before,
                    scale_after=float(scaler.get_scale()),
                    loss=float(loss.detach()),
                    spiked=spiked,
                    max_abs_grad=biggest,
                )
            )
    finally:
        hook.remove()
    return out
