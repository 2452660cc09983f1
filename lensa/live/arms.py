"""The comparison: the same model on the same data trained once per arm (FP32, FP16 + GradScaler, BF16), each
measured. Torch is imported inside the functions."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from lensa.live.config import (
    ARM_LABELS,
    ARMS,
    LOWP_ARMS,
    MAX_RUN_SECONDS,
    Progress,
    RunConfig,
    ShouldStop,
    _check_arms,
)
from lensa.live.device import device_info, resolve_device
from lensa.live.slot import run_slot
from lensa.live.task import _build_mlp, _initial_state, _make_data
from lensa.live.torch_utils import _DTYPE_NAMES, _dtype, _fp32_matmul_precision, _free_memory, _oom_as_live_error, _sync

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from lensa.live.capture import Recorder
    from lensa.numerics.training_recipes import LayerShare
    from lensa.runstats import RunStats


@dataclass(frozen=True)
class ArmResult:
    """One arm of a :class:`Comparison`.

    Per step (``steps`` entries each): ``losses`` (the training loss the arm
    computed, in FP32), ``loss_scales`` (the GradScaler scale used for that
    step's backward pass; None for arms without a scaler), ``skipped`` (the
    optimizer step was skipped because a gradient was inf or NaN; GradScaler
    then halves the scale, which is how it is detected without slowing the
    loop). ``time_s`` covers only the measured steps, after
    ``warmup_steps`` untimed warm-up steps, with the device synchronised
    before each clock read; progress callbacks are outside it.
    ``timed_steps``: the steps on the clock. With ``RunConfig.record`` the
    ``recorded_steps`` (where the Recorder summarised tensors) run off the
    clock, ``time_per_step_s`` is the mean of the other steps and ``time_s``
    is that times all the steps; only when every step was recorded are they
    timed, recording included. ``recording``: the arm's
    :class:`~lensa.runstats.RunStats` (summaries only, tens of kilobytes per
    recorded step; every step's loss, and for FP16 its loss scale and
    skipped steps), None without ``record``.
    ``peak_memory_bytes``: CUDA ``max_memory_allocated`` over the timed
    steps (data, weights and optimizer state included); None on CPU.
    ``saved_for_backward_bytes``: bytes of the distinct tensors autograd kept
    for the backward pass in one step (activations and 16-bit weight copies,
    not the FP32 parameters), measured on every device.
    ``layer_output_dtypes``: the dtype each Linear layer produced inside the
    arm's autocast context, in layer order; ``loss_dtype``: the loss's dtype.
    ``accuracy`` (0..1) and ``eval_loss`` are measured in FP32 on held-out
    samples after training (an arm below 16 bits too: its weights, evaluated
    without quantization). ``wall_s``: the whole arm by the wall clock
    (set-up, warm-up, every step, recording, evaluation), what
    :meth:`RunConfig.arm_seconds` estimates.
    An arm below 16 bits (:data:`~lensa.live.config.LOWP_ARMS`) also has
    ``shares``: each linear layer's input, weight and gradient, the share of
    their values flushed and saturated at :meth:`RunConfig.counted_steps`
    (those steps run off the clock, as recorded ones do).
    """

    arm: str
    label: str
    compute_dtype: str
    losses: tuple[float, ...]
    loss_scales: tuple[float | None, ...]
    skipped: tuple[bool, ...]
    time_s: float
    time_per_step_s: float
    final_loss: float
    eval_loss: float
    accuracy: float
    peak_memory_bytes: int | None
    memory_note: str
    saved_for_backward_bytes: int
    layer_output_dtypes: tuple[str, ...]
    loss_dtype: str
    skipped_steps: int
    warmup_steps: int
    timed_steps: int
    recorded_steps: tuple[int, ...] = ()
    recording: RunStats | None = None
    wall_s: float = 0.0
    shares: tuple[LayerShare, ...] = ()
    counted_steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`.

    ``arms`` holds the finished arms in run order. ``not_run`` maps an arm
    that was asked for but not run to the reason (e.g. no BF16 on this GPU).
    ``cancelled`` is True when ``should_stop`` ended the run early: finished
    arms are kept, the interrupted one is left out (see ``notes``).
    ``wall_s`` is the whole call, data and warm-up included.
    """

    config: RunConfig
    device: str
    device_name: str
    arms: dict[str, ArmResult]
    not_run: dict[str, str] = field(default_factory=dict)
    cancelled: bool = False
    notes: tuple[str, ...] = ()
    wall_s: float = 0.0

    def arm(self, name: str) -> ArmResult | None:
        """The finished arm called ``name``, or None."""
        return self.arms.get(name)

    def recordings(self) -> dict[str, RunStats]:
        """Each finished arm's recorded statistics, by arm (empty without ``RunConfig.record``)."""
        return {name: a.recording for name, a in self.arms.items() if a.recording is not None}


OVERTIME_FACTOR = 2.0
"""A comparison still running after this many times its device's time limit is stopped (see :func:`compare`)."""


class _Cancelled(Exception):
    """Unwinds the arm in progress when ``should_stop()`` says so; never leaves :func:`compare`."""


def _arm_skip_reason(arm: str, device: str) -> str | None:
    import torch

    if arm == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        major, minor = torch.cuda.get_device_capability()
        return (
            f"{torch.cuda.get_device_name()} (compute capability {major}.{minor}) has no native BF16; that needs "
            "Ampere (8.0) or newer. It could only be emulated, slowly, so the BF16 arm is not run."
        )
    return None


def _probe_step(model: torch.nn.Module, step: Callable[[], torch.Tensor]) -> tuple[list[str], str, int]:
    """Run one step with hooks: Linear output dtypes, loss dtype, bytes saved for backward."""
    import torch

    seen: list[str] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.append(str(out.dtype).removeprefix("torch.")))
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        # Count the saved view, not its whole storage: a batch is a view into the training set.
        if t.untyped_storage().data_ptr() not in params:
            saved[t.data_ptr()] = max(saved.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = step()
    finally:
        for h in hooks:
            h.remove()
    return seen, str(loss.dtype).removeprefix("torch."), sum(saved.values())


def _add_stop_points(model: torch.nn.Sequential, check: Callable[[], None]) -> None:
    """Ask ``check`` before each Linear layer's forward and backward pass (an emulated FP16 step of a wide model
    can take seconds). A Python exception raised in a hook unwinds the step as it is."""
    import torch

    def before_backward(_grad: torch.Tensor) -> None:
        check()

    def stop_points(_m: torch.nn.Module, _args: object, out: torch.Tensor) -> None:
        if out.requires_grad:
            out.register_hook(before_backward)  # runs as the backward pass reaches this layer

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_pre_hook(lambda _m, _a: check())
            layer.register_forward_hook(stop_points)


@dataclass
class _Trainer:
    """One arm's model, loss and autocast context, and the training step they make with an optimizer."""

    arm: str
    cfg: RunConfig
    device: str
    model: torch.nn.Module
    x: torch.Tensor
    y: torch.Tensor
    check: Callable[[], None]

    def __post_init__(self) -> None:
        import torch

        # An arm below 16 bits trains in FP32 around its quantized products (lensa.live.lowp).
        self.dtype = _dtype("fp32" if self.arm in LOWP_ARMS else self.arm)
        self.criterion = torch.nn.BCEWithLogitsLoss()
        self.ctx = (
            contextlib.nullcontext()
            if self.dtype is torch.float32
            else torch.autocast(device_type=self.device, dtype=self.dtype)
        )

    def fresh(self) -> tuple[torch.optim.Optimizer, torch.amp.GradScaler]:
        import torch

        opt = torch.optim.Adam(self.model.parameters(), lr=self.cfg.lr)
        # Only FP16 needs loss scaling; a disabled scaler passes everything through.
        return opt, torch.amp.GradScaler(self.device, enabled=self.dtype is torch.float16)

    def make_step(self, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> Callable[[int], torch.Tensor]:
        import torch

        model, criterion, ctx, cfg, check = self.model, self.criterion, self.ctx, self.cfg, self.check
        x, y, pool = self.x, self.y, self.x.shape[0]

        def step(i: int) -> torch.Tensor:
            check()
            opt.zero_grad(set_to_none=True)
            with ctx:
                loss: torch.Tensor = criterion(model(x[i % pool]), y[i % pool])
            scaler.scale(loss).backward()
            if cfg.clip_grad_norm is not None:
                scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad_norm)
            scaler.step(opt)
            scaler.update()
            return loss

        return step


def _warm_up(trainer: _Trainer, tick: Callable[[int, str], None]) -> tuple[list[str], str, int]:
    """The untimed warm-up steps (allocator, kernel choice, AMX/cuBLAS set-up), the first one probed."""
    arm, warmup_steps = trainer.arm, trainer.cfg.warmup_steps
    opt, scaler = trainer.fresh()
    step = trainer.make_step(opt, scaler)
    tick(0, f"{arm}: warm-up")
    probed = _probe_step(trainer.model, lambda: step(0))
    tick(1, f"{arm}: warm-up")
    for i in range(1, warmup_steps):
        step(i)
        tick(1, f"{arm}: warm-up {i + 1}/{warmup_steps}")
    return probed


def _recorder_for(
    arm: str, cfg: RunConfig, model: torch.nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler
) -> Recorder | None:
    """A Recorder at ``cfg.recorded_steps()``, or None when nothing is recorded."""
    recorded = cfg.recorded_steps()
    if not recorded:
        return None
    from lensa.live.capture import Recorder  # imports torch at once, so only here

    meta = {"arm": arm, "source": "lab", "config": asdict(cfg)}
    # Inline summaries: the recorded steps are off the clock anyway, and a summary process working beside
    # the timed steps would share their cores and slow them.
    scaled = scaler.is_enabled()
    return Recorder(model, opt, steps=recorded, scaler=scaler if scaled else None, meta=meta, background=False)


def _timed_steps(
    arm: str,
    n: int,
    device: str,
    off_clock: frozenset[int],
    run_step: Callable[[int], None],
    tick: Callable[[int, str], None],
) -> tuple[float, int | None]:
    """Run steps 0..n-1 on the clock, except those in ``off_clock`` (counted from 1): seconds, and the CUDA peak."""
    import torch

    if device == "cuda":
        _free_memory(device)
        torch.cuda.reset_peak_memory_stats()
    chunk = max(1, math.ceil(n / 20))
    elapsed = 0.0
    peak_before = 0
    done = 0
    while done < n:
        _sync(device)
        t0 = time.perf_counter()
        for i in range(done, min(n, done + chunk)):
            if i + 1 not in off_clock:
                run_step(i)
                continue
            _sync(device)
            elapsed += time.perf_counter() - t0
            if device == "cuda":
                peak_before = max(peak_before, int(torch.cuda.max_memory_allocated()))
            run_step(i)
            _sync(device)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
        _sync(device)
        elapsed += time.perf_counter() - t0
        advanced = min(n, done + chunk) - done
        done += advanced
        tick(advanced, f"{arm}: step {done}/{n}")
    peak = max(peak_before, int(torch.cuda.max_memory_allocated())) if device == "cuda" else None
    return elapsed, peak


def _scales_and_skips(
    n: int, scale_used: torch.Tensor | None, scale_after: torch.Tensor | None
) -> tuple[list[float | None], list[bool]]:
    """Each step's loss scale and whether it was skipped, from the scales before and after it (None: no scaler)."""
    if scale_used is None or scale_after is None:
        return [None] * n, [False] * n
    used = [float(v) for v in scale_used.tolist()]
    after = scale_after.tolist()
    # GradScaler multiplies the scale by backoff_factor (< 1) exactly when it skips a step.
    skipped = [a < u for u, a in zip(used, after, strict=True)]
    return list(used), skipped


@dataclass(frozen=True)
class _Measured:
    """The measured steps of one arm: per step its loss, loss scale (None without a scaler) and whether it was
    skipped; seconds on the clock, the CUDA peak, the steps on the clock, and the recording."""

    losses: list[float]
    scales: list[float | None]
    skipped: list[bool]
    elapsed: float
    peak: int | None
    timed: int
    recording: RunStats | None


def _measured_steps(trainer: _Trainer, tick: Callable[[int, str], None]) -> _Measured:
    """``cfg.steps`` steps with a fresh optimizer and scaler, timed but for the recorded ones (see ArmResult)."""
    import torch

    arm, cfg, device, n = trainer.arm, trainer.cfg, trainer.device, trainer.cfg.steps
    one = torch.ones((), device=device)
    opt, scaler = trainer.fresh()
    step = trainer.make_step(opt, scaler)
    scaled = scaler.is_enabled()
    recorded = cfg.recorded_steps()
    recorder = _recorder_for(arm, cfg, trainer.model, opt, scaler)
    counted = frozenset(cfg.counted_steps()) if arm in LOWP_ARMS else frozenset()
    # Recorded steps summarise their tensors on the CPU, counted ones read counts back: keep that off the clock and
    # out of the peak, unless every step is one (then there is nothing else to time).
    special = frozenset(recorded) | counted
    off_clock = special if len(special) < n else frozenset()
    losses = torch.empty(n, device=device)
    scale_used = torch.empty(n, device=device) if scaled else None
    scale_after = torch.empty(n, device=device) if scaled else None

    def run_step(i: int) -> None:
        # Device-side copies, read once at the end: .item() per step would stall the GPU.
        if scale_used is not None:
            scale_used[i] = scaler.scale(one)
        if counted:
            from lensa.live import lowp

            lowp.set_counting(trainer.model, i + 1 in counted)
        losses[i] = step(i).detach()
        if scale_after is not None:
            scale_after[i] = scaler.scale(one)
        if recorder is not None:
            recorder.step()  # the step's loss is filled in after the run, without a read per step

    try:
        elapsed, peak = _timed_steps(arm, n, device, off_clock, run_step, tick)
    finally:
        if recorder is not None:
            recorder.close()
    loss_list = [float(v) for v in losses.tolist()]
    scales, skipped = _scales_and_skips(n, scale_used, scale_after)
    recording = None
    if recorder is not None:
        recording = recorder.stats()
        for i, (loss, scale, skip) in enumerate(zip(loss_list, scales, skipped, strict=True), start=1):
            recording.record_step(i, loss, scale, skip)
    if counted:
        from lensa.live import lowp

        lowp.set_counting(trainer.model, False)
    return _Measured(loss_list, scales, skipped, elapsed, peak, n - len(off_clock), recording)


def _train_arm(
    arm: str,
    cfg: RunConfig,
    device: str,
    data: tuple[torch.Tensor, ...],
    init_state: dict[str, torch.Tensor],
    tick: Callable[[int, str], None],
    check: Callable[[], None] = lambda: None,
) -> ArmResult:
    import torch

    arm_start = time.perf_counter()
    x, y, x_eval, y_eval = data
    model = _build_mlp(cfg.features, cfg.width, cfg.depth)
    model.load_state_dict(init_state)
    model.to(device)
    quantized = arm in LOWP_ARMS
    if quantized:
        from lensa.live import lowp

        lowp.quantize_model(model, arm, seed=cfg.seed)
    trainer = _Trainer(arm, cfg, device, model, x, y, check)
    _add_stop_points(model, check)
    layer_dtypes, loss_dtype, saved_bytes = _warm_up(trainer, tick)
    # Start the measured run from the same initial weights and a fresh optimizer and scaler (and a fresh recipe:
    # delayed scales, the stochastic draws from the seed again).
    model.load_state_dict(init_state)
    if quantized:
        lowp.reset(model)
    run = _measured_steps(trainer, tick)
    with torch.no_grad(), lowp.full_precision(model) if quantized else contextlib.nullcontext():
        logits = model(x_eval)
        eval_loss = float(trainer.criterion(logits, y_eval))
        accuracy = float(((logits > 0).float() == y_eval).float().mean())
    n, timed, elapsed = cfg.steps, run.timed, run.elapsed
    return ArmResult(
        arm=arm,
        label=ARM_LABELS[arm],
        compute_dtype=_DTYPE_NAMES.get(arm, "float32"),
        losses=tuple(run.losses),
        loss_scales=tuple(run.scales),
        skipped=tuple(run.skipped),
        time_s=elapsed if timed == n else elapsed / timed * n,
        time_per_step_s=elapsed / timed,
        final_loss=run.losses[-1],
        eval_loss=eval_loss,
        accuracy=accuracy,
        peak_memory_bytes=run.peak,
        memory_note="torch.cuda.max_memory_allocated over the timed steps"
        if run.peak is not None
        else "not measured on CPU (PyTorch keeps no peak statistics for CPU memory)",
        saved_for_backward_bytes=saved_bytes,
        layer_output_dtypes=tuple(layer_dtypes),
        loss_dtype=loss_dtype,
        skipped_steps=sum(run.skipped),
        warmup_steps=cfg.warmup_steps,
        timed_steps=timed,
        recorded_steps=cfg.recorded_steps(),
        recording=run.recording,
        wall_s=time.perf_counter() - arm_start,
        shares=lowp.layer_shares(model) if quantized else (),
        counted_steps=cfg.counted_steps() if quantized else (),
    )


def compare(
    config: RunConfig | None = None,
    arms: Sequence[str] = ARMS,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    on_arm: Callable[[str, ArmResult, str, str], None] | None = None,
) -> Comparison:
    """Train the same model on the same data once per arm and measure each.

    Arms: ``"fp32"`` (baseline, no autocast; TF32 is off for the whole call
    so FP32 means FP32), ``"fp16"`` (autocast + GradScaler), ``"bf16"``
    (autocast, no scaler). An arm the device cannot run is listed in
    ``Comparison.not_run`` with the reason. ``progress(fraction, message)``
    is called with 0..1 as work proceeds (outside the timed region).
    ``should_stop()`` is polled after every step and inside each step (before
    every Linear layer's forward and backward pass), so a stop takes effect
    within one layer's work even when a step is long; when it returns True
    the call returns a Comparison with ``cancelled=True`` and the arms
    finished so far. A run still going after :data:`OVERTIME_FACTOR` times
    the device's time limit is stopped the same way, with a note (the
    estimate was checked first, so this is a guard against a machine that
    slowed down, not a second limit). ``on_arm(arm, result, device,
    device_name)`` is called as each arm finishes. Holds the run slot
    (``LiveError(kind="busy")`` if taken).

    Raises ``LiveError`` with kind ``"invalid"`` (config or arms),
    ``"too_long"`` (this machine's calibrated estimate passes
    :data:`~lensa.live.config.MAX_RUN_SECONDS`), ``"no_cuda"`` or ``"oom"``.
    """
    cfg = config or RunConfig()
    arms = _check_arms(arms)
    device = resolve_device(cfg.device)
    cfg.validate(device, arms)
    with run_slot(), _oom_as_live_error(device, "the comparison"), _fp32_matmul_precision(device, "highest"):
        return _compare(cfg, arms, device, progress, should_stop, on_arm)


def _run_notes(cfg: RunConfig, device: str) -> list[str]:
    """What the comparison's reader should know before its numbers: threads on a CPU, recorded steps."""
    import torch

    notes: list[str] = []
    if device == "cpu":
        notes.append(f"CPU run with {torch.get_num_threads()} threads; peak memory is not measured on CPU.")
    recorded = cfg.recorded_steps()
    if recorded and len(recorded) < cfg.steps:
        notes.append(
            f"Recorded {len(recorded)} of the {cfg.steps} steps; they ran off the clock, and each arm's time counts "
            "them at the pace of its other steps."
        )
    elif recorded:
        notes.append("Every step was recorded, so the times include the recording.")
    return notes


def _lab_data(cfg: RunConfig, device: str) -> tuple[torch.Tensor, ...]:
    """The training batches and the held-out samples, drawn once from ``cfg.seed``, on ``device``."""
    import torch

    gen = torch.Generator().manual_seed(cfg.seed)
    pool = cfg.train_batches(device)
    x, y = _make_data(pool * cfg.batch_size, cfg.features, gen)
    x, y = x.view(pool, cfg.batch_size, cfg.features), y.view(pool, cfg.batch_size, 1)
    x_eval, y_eval = _make_data(cfg.eval_size, cfg.features, gen)
    return tuple(t.to(device) for t in (x, y, x_eval, y_eval))


class _Watch:
    """The comparison's progress and its stop points: ``check`` raises :class:`_Cancelled` when asked to stop or
    past :data:`OVERTIME_FACTOR` times the device's time limit; ``tick`` reports progress, then checks."""

    def __init__(
        self, start: float, device: str, total: int, progress: Progress | None, should_stop: ShouldStop | None
    ):
        self.overtime_at = start + OVERTIME_FACTOR * MAX_RUN_SECONDS[device]
        self.overtime = False
        self.total = total
        self.units = 0
        self.progress = progress
        self.should_stop = should_stop

    def check(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise _Cancelled
        if time.perf_counter() > self.overtime_at:
            self.overtime = True
            raise _Cancelled

    def tick(self, advance: int, message: str) -> None:
        self.units += advance
        if self.progress is not None:
            self.progress(min(1.0, self.units / self.total), message)
        self.check()


def _compare(
    cfg: RunConfig,
    arms: tuple[str, ...],
    device: str,
    progress: Progress | None,
    should_stop: ShouldStop | None,
    on_arm: Callable[[str, ArmResult, str, str], None] | None = None,
) -> Comparison:
    import torch

    start = time.perf_counter()
    device_name = torch.cuda.get_device_name() if device == "cuda" else device_info("cpu").name
    not_run = {a: r for a in arms if (r := _arm_skip_reason(a, device))}
    to_run = [a for a in arms if a not in not_run]
    notes = _run_notes(cfg, device)
    data = _lab_data(cfg, device)
    init_state = _initial_state(cfg)
    watch = _Watch(start, device, max(1, len(to_run) * (cfg.steps + cfg.warmup_steps)), progress, should_stop)

    results: dict[str, ArmResult] = {}
    cancelled = False
    try:
        watch.check()
        for arm in to_run:
            results[arm] = _train_arm(arm, cfg, device, data, init_state, watch.tick, watch.check)
            if on_arm is not None:
                on_arm(arm, results[arm], device, device_name)
            _free_memory(device)
    except _Cancelled:
        cancelled = True
        left = [a for a in to_run if a not in results]
        if watch.overtime:
            notes.append(
                f"Stopped after {OVERTIME_FACTOR * MAX_RUN_SECONDS[device]:.0f} s, twice the time limit: this machine "
                "ran much slower than its calibration measured (other work may be sharing it)."
            )
        if left:
            notes.append(f"Cancelled during the {left[0]} arm; it and any later arms ({', '.join(left)}) are left out.")
        _free_memory(device)
    if progress is not None:
        progress(watch.units / watch.total if cancelled else 1.0, "cancelled" if cancelled else "done")
    return Comparison(
        config=cfg,
        device=device,
        device_name=device_name,
        arms=results,
        not_run=not_run,
        cancelled=cancelled,
        notes=tuple(notes),
        wall_s=time.perf_counter() - start,
    )
