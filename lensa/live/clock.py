"""This machine's clock for the lab: a short calibration that times each arm here, and the cost model it fills.

The lab must say how long a comparison will take before it runs, refuse one
that would run too long, and pick defaults that finish quickly. A model
fitted once on one CPU is wrong on another: on a CPU without 16-bit matrix
units torch converts each FP16 or BF16 product to FP32 and back, and an
AMP step can be tens of times slower than an FP32 one. So the numbers come
from this machine. :func:`calibrate` times, per arm, the lab's own training
step (autocast, GradScaler for FP16, clipping, Adam) on a few small probe
models, and :class:`CostModel` holds what it measured:

- ``layer_step_s``: per Linear layer per step, the fixed work (Python, kernel
  launches, per-tensor optimizer calls), from a tiny model;
- ``param_step_s``: per parameter per step, the memory-bound work (Adam,
  clipping, zeroing, and for 16-bit arms autocast's weight copies), from the
  optimizer part of a step of the widest rate probe's model;
- ``rate_by_width``: the matmul rate at each of :data:`RATE_WIDTHS`, from the step time of a model of that
  width whose batch is grown until one step takes about :data:`PROBE_STEP_S`. An emulated 16-bit product
  is a plain loop whose speed depends on whether the weights fit the caches, so it can be several times
  slower at width 1024 than at 256; a native one is about as fast at every width. Between the widths the
  rate is interpolated, past them it stays at the nearest one's (beyond the caches it levels off);
  ``flop_per_s`` is the rate at the widest width every arm measured;
- ``arm_s``: an arm's set-up; ``data_value_s`` per generated training value;
- ``record_value_s`` and ``record_tensor_s``: what the lab's Recorder costs
  at a recorded step, per value and per tensor summarised (fp32 arm), and
  ``record_scale``: each other arm's recorded step over fp32's (16-bit tensors
  cost more to summarise);
- for the arms below 16 bits (:mod:`lensa.live.lowp`), whose products are FP32's: ``lowp_pass_s`` and
  ``lowp_value_s``, each kind of quantization's fixed cost and cost per value
  (:func:`lensa.numerics.training_recipes.pass_class`: recipe, rounding, rotation, direction), timed on a small and a
  larger tensor; ``lowp_layer_s``, what the quantized layer's own Python adds per layer and step; ``count_pass_s`` and
  ``count_value_s``, what counting a pass's flushed and saturated values adds at a counted step.

The whole calibration takes at most about :data:`CALIBRATION_BUDGET_S`; the
lab's worker process runs it once when it starts and keeps the result for
its life (:mod:`lensa.live.worker`). Torch is imported inside the functions;
:class:`CostModel` itself is plain data, so the server can hold one.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ARMS_TIMED: tuple[str, ...] = ("fp32", "fp16", "bf16")
CALIBRATION_BUDGET_S = 2.0
"""The calibration's time budget (seconds); the probes shrink to fit it on a slow machine."""
LOWP_CALIBRATION_BUDGET_S = 1.0
"""The part of the calibration that times the quantizations of the arms below 16 bits (on top of the budget above); a
kind of pass the time left cannot pay for takes the median of those timed."""
_LOWP_SMALL = (64, 64)
_LOWP_LARGE = (512, 256)
PROBE_STEP_S = 0.03
"""Each rate probe's batch grows until one step takes about this long: long enough for the clock, short enough
to repeat."""
PROBE_REPEATS = 3
"""Timed steps per probe (the shortest is kept), after one untimed step."""
PROBE_FEATURES = 64
RATE_WIDTHS = (64, 256, 1024)
"""Widths the matmul rate is measured at: the lab's narrowest, a middle one, and one whose FP16 weights (2 MB a
layer) outgrow a core's L2 cache, where an emulated product slows down."""
_LAB_BATCH = 256
"""Every width but the widest is probed at this batch at least: the lab's runs use 256 and more (its defaults
512-1024), and where FP16 is emulated a smaller batch's products can fit the caches and run much faster (1.6x
at width 256 without vector kernels). The widest is probed at :data:`_MIN_BATCH` and up: its weights alone
outgrow the caches, so its rate hardly depends on the batch, and a larger one would cost seconds."""
_RECORD_PROBE_STEP_S = 0.01
"""An arm's recording is timed on its own only when its matmuls at the recording probe's size would take at most
this long per step (a native arm); an emulated arm's steps would take the budget."""
_MIN_BATCH = 16
_MAX_BATCH = 2048
NATIVE_FLAGS: dict[str, tuple[str, ...]] = {
    "fp16": ("amx_fp16", "avx512_fp16"),
    "bf16": ("amx_bf16", "avx512_bf16"),
}
"""CPU flags that give a 16-bit format native arithmetic (matrix units or vector instructions)."""
SLOWER = 1.1
"""An AMP arm whose step takes more than this times FP32's is called slower than FP32 (past timing noise)."""


@dataclass(frozen=True)
class CostModel:
    """Per-arm time model of one lab comparison on one device, measured here by :func:`calibrate`.

    Per step of an arm: ``layer_step_s[arm]`` per Linear layer, plus
    ``param_step_s[arm]`` per parameter, plus matmul FLOP / :meth:`rate` (``rate_by_width[arm]``, measured
    at :data:`RATE_WIDTHS`; ``flop_per_s[arm]`` at the widest width every arm measured).
    Per arm: ``arm_s`` of set-up and an FP32 evaluation pass. Per run:
    ``data_value_s`` per training value generated. Per recorded step of an
    arm: ``record_value_s`` per value and ``record_tensor_s`` per tensor the
    Recorder summarises (the fp32 arm's), times ``record_scale[arm]`` (1 where absent).
    ``slowdown[arm]``: the arm's matmul time over FP32's (the rates' ratio)
    at the widest width every arm measured (> 1: slower than FP32). ``capability``: torch's CPU
    kernel level (``torch.backends.cpu.get_cpu_capability()``; the GPU's
    name on CUDA); ``cpu_flags``: the 16-bit flags the CPU has.
    ``calibration_s``: how long the calibration took; ``threads``: torch's
    threads while it ran.
    """

    device: str
    flop_per_s: dict[str, float]
    param_step_s: dict[str, float]
    layer_step_s: dict[str, float]
    arm_s: float
    data_value_s: float = 0.0
    record_value_s: float = 0.0
    record_tensor_s: float = 0.0
    rate_by_width: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    record_scale: dict[str, float] = field(default_factory=dict)
    slowdown: dict[str, float] = field(default_factory=dict)
    capability: str = ""
    cpu_flags: tuple[str, ...] = ()
    calibration_s: float = 0.0
    threads: int = 0
    lowp_pass_s: dict[str, float] = field(default_factory=dict)
    lowp_value_s: dict[str, float] = field(default_factory=dict)
    lowp_layer_s: float = 0.0
    count_pass_s: float = 0.0
    count_value_s: float = 0.0

    def pass_cost(self, cls: str) -> tuple[float, float]:
        """(seconds, seconds per value) of one quantization of kind ``cls``
        (:func:`lensa.numerics.training_recipes.pass_class`); a kind not timed takes the medians of those that were (0
        when none was)."""
        if cls in self.lowp_pass_s:
            return self.lowp_pass_s[cls], self.lowp_value_s[cls]
        if not self.lowp_pass_s:
            return 0.0, 0.0
        return statistics.median(self.lowp_pass_s.values()), statistics.median(self.lowp_value_s.values())

    def rate(self, arm: str, width: int) -> float:
        """``arm``'s matmul rate (FLOP/s) in a model of this ``width``.

        From ``rate_by_width[arm]`` (width, rate) pairs: interpolated in log-log between the measured widths, the
        nearest one's rate outside them; ``flop_per_s[arm]`` where no widths were measured.
        """
        table = self.rate_by_width.get(arm, ())
        if not table:
            return self.flop_per_s[arm]
        if width <= table[0][0]:
            return table[0][1]
        for (w0, r0), (w1, r1) in itertools.pairwise(table):
            if width <= w1:
                f = math.log(width / w0) / math.log(w1 / w0)
                return float(math.exp((1 - f) * math.log(r0) + f * math.log(r1)))
        return table[-1][1]

    def emulated(self, arm: str) -> bool:
        """True when this arm's 16-bit matmuls have no native path here: measured slower than FP32.

        On a CPU the flags say whether native instructions exist at all; the
        measurement says whether torch uses them (``ATEN_CPU_CAPABILITY`` may
        hold it to older kernels), so the measurement decides.
        """
        return arm != "fp32" and self.slowdown.get(arm, 1.0) > SLOWER

    def missing_flags(self, arm: str) -> tuple[str, ...]:
        """The native flags for ``arm``'s format that this CPU lacks (all of them when it has none)."""
        wanted = NATIVE_FLAGS.get(arm, ())
        return tuple(f for f in wanted if f not in self.cpu_flags)


_CLOCKS: dict[str, CostModel] = {}


def machine_clock(device: str) -> CostModel:
    """This process's :class:`CostModel` for ``"cpu"`` or ``"cuda"``: calibrated on first use, then kept."""
    if device not in _CLOCKS:
        _CLOCKS[device] = calibrate(device)
    return _CLOCKS[device]


def remember_clock(clock: CostModel) -> None:
    """Keep ``clock`` as this process's clock for its device (a restarted worker keeps its predecessor's)."""
    _CLOCKS[clock.device] = clock


def _best_time(fn: Callable[[], object], device: str, repeats: int = PROBE_REPEATS) -> float:
    """The shortest of ``repeats`` timed calls: other work on a shared machine only ever adds time, and a
    probe this short is easily caught by it, so the minimum is this machine's pace."""
    from lensa.live.torch_utils import _sync

    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


@contextlib.contextmanager
def _quiet_grads() -> Iterator[None]:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def _probe(
    arm: str, device: str, width: int, depth: int, batch: int
) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], None], Callable[[], None]]:
    """A model and the lab's training step for ``arm``: (model, optimizer, whole step, optimizer part only)."""
    import torch

    from lensa.live.task import _build_mlp
    from lensa.live.torch_utils import _dtype

    with _quiet_grads():
        model = _build_mlp(PROBE_FEATURES, width, depth).to(device)
        x = torch.randn(batch, PROBE_FEATURES, device=device)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    dtype = _dtype(arm)
    ctx: Any = contextlib.nullcontext() if arm == "fp32" else torch.autocast(device_type=device, dtype=dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device, enabled=dtype is torch.float16)
    criterion = torch.nn.BCEWithLogitsLoss()
    params = list(model.parameters())
    losses = torch.empty(1, device=device)
    stop = [False]

    # The lab's step also asks whether to stop before each layer's forward and backward pass
    # (lensa.live.arms._train_arm) and keeps its loss: the probe pays the same.
    def check() -> None:
        if stop[0]:
            raise RuntimeError("unreachable")

    def before_backward(_grad: torch.Tensor) -> None:
        check()

    def stop_points(_m: torch.nn.Module, _args: object, out: torch.Tensor) -> None:
        if out.requires_grad:
            out.register_hook(before_backward)

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_pre_hook(lambda _m, _a: check())
            layer.register_forward_hook(stop_points)

    def optimizer_part() -> None:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()

    def step() -> None:
        check()
        opt.zero_grad(set_to_none=True)
        with ctx:
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        optimizer_part()
        losses[0] = loss.detach()

    return model, opt, step, optimizer_part


def _macs(width: int, depth: int) -> int:
    return PROBE_FEATURES * width + (depth - 1) * width * width + width


def _params(width: int, depth: int) -> int:
    return _macs(width, depth) + depth * width + 1


def _widths_timed(
    arm: str, device: str, depth: int, arm_deadline: float, set_up: list[float]
) -> tuple[list[tuple[int, int, float]], tuple[torch.nn.Module, Callable[[], None]]]:
    """The step at each width, at a batch whose products take about PROBE_STEP_S (as the step at the previous
    width predicts); a width the time left cannot pay for is left out. Each width's one-off set-up goes to
    ``set_up``. Returns (width, batch, seconds) per width, and the widest model with its optimizer part."""
    steps: list[tuple[int, int, float]] = []
    widest: tuple[torch.nn.Module, Callable[[], None]] | None = None
    for width in RATE_WIDTHS:
        flop_per_sample = 6.0 * _macs(width, depth)
        if steps:
            w0, b0, t0 = steps[-1]
            raw = 6.0 * _macs(w0, depth) * b0 / t0  # the previous step's FLOP/s, overheads included
            want = PROBE_STEP_S * raw / flop_per_sample
            least = _MIN_BATCH if width == RATE_WIDTHS[-1] else _LAB_BATCH
            batch = min(_MAX_BATCH, max(least, 2 ** round(math.log2(max(want, 1.0)))))
            if time.perf_counter() + 3 * flop_per_sample * batch / raw > arm_deadline:
                break
        else:
            batch = _LAB_BATCH
        t_step, one_off, model, opt_part = _time_step(arm, device, width, depth, batch)
        if not steps and t_step < 0.5 * PROBE_STEP_S and batch < _MAX_BATCH:
            # The first width: a step too short to time well; once more, larger.
            batch = min(_MAX_BATCH, 2 ** round(math.log2(batch * PROBE_STEP_S / t_step)))
            t_step, one_off, model, opt_part = _time_step(arm, device, width, depth, batch)
        steps.append((width, batch, t_step))
        set_up.append(one_off)
        widest = (model, opt_part)
    assert widest is not None  # the first width is always measured
    return steps, widest


def _param_step_s(arm: str, device: str, model: torch.nn.Module, opt_part: Callable[[], None]) -> float:
    """Per-parameter work: the optimizer part of a step (Adam, clipping, scaler) and autocast's weight copies."""
    import torch

    n_params = sum(p.numel() for p in model.parameters())
    opt_s = _best_time(opt_part, device)
    cast_s = 0.0
    if arm != "fp32":
        # Autocast copies each weight to 16 bits in every forward pass (and keeps it for the backward).
        dtype = torch.float16 if arm == "fp16" else torch.bfloat16
        weights = [p for p in model.parameters() if p.dim() == 2]

        def cast(w: list[torch.nn.Parameter] = weights, d: torch.dtype = dtype) -> None:
            for t in w:
                t.to(d)

        cast_s = _best_time(cast, device)
    return (opt_s + cast_s) / n_params


def _calibrate_arm(
    arm: str, device: str, depth: int, arm_deadline: float, set_up: list[float]
) -> tuple[float, float, tuple[tuple[int, float], ...]]:
    """One arm's seconds per layer, seconds per parameter, and FLOP/s of its products at each width measured."""
    # Fixed work per layer: a model whose matmuls and parameters are negligible.
    _m, _o, tiny, _p = _probe(arm, device, 16, depth, 8)
    tiny()
    layer_s = _best_time(tiny, device, repeats=5) / (depth + 1)
    steps, (model, opt_part) = _widths_timed(arm, device, depth, arm_deadline, set_up)
    param_s = _param_step_s(arm, device, model, opt_part)
    del model, opt_part
    rates = []
    for width, batch, t_step in steps:
        fixed = layer_s * (depth + 1) + param_s * _params(width, depth)
        # A floor of a quarter of the step keeps a noisy, overhead-bound probe from an endless rate.
        rates.append((width, 6.0 * _macs(width, depth) * batch / max(t_step - fixed, 0.25 * t_step)))
    return layer_s, param_s, tuple(rates)


def _capability(device: str) -> tuple[str, tuple[str, ...]]:
    """The device's name (CUDA) or torch's CPU capability, and the CPU's native 16-bit flags."""
    import torch

    from lensa.live.device import _read_cpuinfo

    if device == "cuda":
        return torch.cuda.get_device_name(), ()
    parsed = _read_cpuinfo("/proc/cpuinfo")
    have = parsed[2] if parsed else set()
    flags = tuple(f for flag_set in NATIVE_FLAGS.values() for f in flag_set if f in have)
    return str(torch.backends.cpu.get_cpu_capability()), flags


def calibrate(device: str = "cpu", budget_s: float = CALIBRATION_BUDGET_S) -> CostModel:
    """Time the lab's training step for each arm on ``device`` and return the :class:`CostModel` it gives.

    About ``budget_s`` at most (a rate probe the time left cannot pay for is left out, and the widths
    measured stand for it). Holds no run slot: the worker calls it before it takes any run.
    """
    import torch

    from lensa.live.torch_utils import _fp32_matmul_precision

    # One-off imports (Adam's first use loads torch._dynamo, seconds) are not this machine's pace: pay them first,
    # and the recipes' compiled kernel's loading (or, the first time on a machine, its compilation).
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    from lensa.live.lowp import warm_up

    warm_up()
    start = time.perf_counter()
    deadline = start + budget_s
    per_arm_budget = budget_s * 0.75 / len(ARMS_TIMED)
    param: dict[str, float] = {}
    layer: dict[str, float] = {}
    by_width: dict[str, tuple[tuple[int, float], ...]] = {}
    set_up: list[float] = []
    depth = 2
    with _fp32_matmul_precision(device, "highest"):
        for i, arm in enumerate(ARMS_TIMED):
            arm_deadline = min(deadline, start + per_arm_budget * (i + 1))
            layer[arm], param[arm], by_width[arm] = _calibrate_arm(arm, device, depth, arm_deadline, set_up)
        data_value_s = _time_data(device)
        record_value_s, record_tensor_s, record_scale = _time_recording(
            device, {arm: min(r for _w, r in rates) for arm, rates in by_width.items()}
        )
        lowp = _time_lowp(device, time.perf_counter() + LOWP_CALIBRATION_BUDGET_S)
    # The headline rate and FP32 against each arm: at the widest width every arm measured.
    common = max(set.intersection(*(set(dict(rates)) for rates in by_width.values())))
    flop = {arm: dict(rates)[common] for arm, rates in by_width.items()}
    capability, flags = _capability(device)
    return CostModel(
        device=device,
        flop_per_s=flop,
        param_step_s=param,
        layer_step_s=layer,
        arm_s=statistics.median(set_up),
        data_value_s=data_value_s,
        record_value_s=record_value_s,
        record_tensor_s=record_tensor_s,
        record_scale=record_scale,
        rate_by_width=by_width,
        slowdown={arm: flop["fp32"] / flop[arm] for arm in ARMS_TIMED},
        capability=capability,
        cpu_flags=flags,
        calibration_s=time.perf_counter() - start,
        threads=torch.get_num_threads(),
        **lowp,
    )


def _time_step(
    arm: str, device: str, width: int, depth: int, batch: int
) -> tuple[float, float, torch.nn.Module, Callable[[], None]]:
    """(steady step seconds, one-off seconds, model, optimizer part) of ``arm``'s lab step at this shape.

    The step: the shortest of a few timed after a first (a long step is timed once: its own length keeps the
    noise small). The one-off seconds: building the model, and its first step past a steady one (what an
    arm of the lab pays once).
    """
    t0 = time.perf_counter()
    model, _o, step, opt_part = _probe(arm, device, width, depth, batch)
    t1 = time.perf_counter()
    step()  # the first step at a shape pays one-off kernel set-up
    once = time.perf_counter() - t1
    repeats = 1 if once > 3 * PROBE_STEP_S else 2 if once > PROBE_STEP_S else PROBE_REPEATS
    t_step = _best_time(step, device, repeats=repeats)
    return t_step, t1 - t0 + max(once - t_step, 0.0), model, opt_part


def _time_data(device: str) -> float:
    """Seconds per training value generated (normal draws, labels, the copy to the device)."""
    import torch

    from lensa.live.task import _make_data

    n = 1 << 14
    gen = torch.Generator().manual_seed(0)
    t = _best_time(lambda: [v.to(device) for v in _make_data(n, PROBE_FEATURES, gen)], device)
    return t / (n * (PROBE_FEATURES + 1))


def _time_recording(device: str, arms: dict[str, float]) -> tuple[float, float, dict[str, float]]:
    """(seconds per value, seconds per tensor) the lab's Recorder adds to a recorded step of the fp32 arm, and
    per arm the time of a recorded step over the fp32 arm's.

    Two fp32 models: a tiny one, whose cost is mostly per tensor, and a wider one, mostly per value; each timed
    with and without the Recorder, and the two equations give both. Then the wider one again for each other arm
    in ``arms`` (arm -> its matmul FLOP/s): a 16-bit arm's tensors cost more to summarise (a third more for
    BF16 here). An arm whose steps are too slow to time it in the budget (an emulated one) takes the other
    16-bit arm's factor, or 1.
    """
    rows = []
    for width, batch in ((16, 8), (256, 512)):
        t, values, tensors = _recorded_step("fp32", device, width, batch)
        rows.append((t, values, tensors))
    (t_small, v_small, n_small), (t_big, v_big, n_big) = rows
    det = v_big * n_small - v_small * n_big
    per_value = max((t_big * n_small - t_small * n_big) / det, 0.0) if det else 0.0
    per_tensor = max((t_small - per_value * v_small) / n_small, 0.0)
    scale: dict[str, float] = {}
    for arm, flop_per_s in arms.items():
        if arm == "fp32" or 6.0 * _macs(256, 2) * 512 / flop_per_s > _RECORD_PROBE_STEP_S or t_big <= 0:
            continue
        scale[arm] = _recorded_step(arm, device, 256, 512)[0] / t_big
    for arm in arms:
        if arm != "fp32" and arm not in scale:
            scale[arm] = next((v for a, v in scale.items() if a != "fp32"), 1.0)
    return per_value, per_tensor, scale


def _recorded_step(arm: str, device: str, width: int, batch: int) -> tuple[float, int, int]:
    """(seconds the Recorder adds to one recorded step, values summarised, tensors summarised) for ``arm``."""
    from lensa.live.capture import Recorder

    depth = 2
    model, opt, step, _p = _probe(arm, device, width, depth, batch)
    step()
    bare = _best_time(step, device)

    # A recorder's whole life, as an arm of the lab lives it: made, recorded steps, read, closed (its one-off
    # cost shared by three steps; the lab records about ten, so this errs on the long side).
    def recorded() -> None:
        recorder = Recorder(model, opt, steps=(1, 2, 3), background=False)
        try:
            for _ in range(3):
                step()
                recorder.step()
            recorder.stats()
        finally:
            recorder.close()

    t = _best_time(recorded, device, repeats=2) / 3
    values = 3 * _params(width, depth) + 2 * batch * (2 * depth * width + 1)
    tensors = 3 * 2 * (depth + 1) + 2 * (2 * depth + 1)
    return max(t - bare, 0.0), values, tensors


def _time_lowp(device: str, deadline: float) -> dict[str, Any]:
    """:class:`CostModel`'s fields for the arms below 16 bits: each kind of pass the lab's recipes make, timed on
    a small and a larger tensor (a fixed cost and a cost per value between the two), what counting adds, and the
    quantized layer's own overhead per layer and step."""
    import torch

    from lensa.live import lowp
    from lensa.live.task import _build_mlp
    from lensa.numerics.training_recipes import TRAINING_RECIPES, TrainingRecipe, model_passes

    shapes = [(256, 64, 256, False), (256, 256, 256, True), (256, 256, 1, True)]
    kinds: dict[str, tuple[Any, bool]] = {}
    for recipe in TRAINING_RECIPES.values():
        for p, cls in model_passes(recipe, shapes):
            kinds.setdefault(cls, (p, cls.endswith("delayed")))
    small, large = _LOWP_SMALL[0] * _LOWP_SMALL[1], _LOWP_LARGE[0] * _LOWP_LARGE[1]

    def fit(p: Any, delayed: bool, counting: bool = False) -> tuple[float, float]:
        runs = [lowp.pass_timer(p, delayed, *shape, device, counting) for shape in (_LOWP_SMALL, _LOWP_LARGE)]
        for run in runs:
            run()  # one-off set-up (the generator, the delayed scale's window)
        t_small, t_large = (_best_time(run, device) for run in runs)
        per_value = max((t_large - t_small) / (large - small), 0.0)
        return max(t_small - per_value * small, 0.0), per_value

    fixed: dict[str, float] = {}
    per_value: dict[str, float] = {}
    for cls, (p, delayed) in kinds.items():
        if time.perf_counter() > deadline:
            break
        fixed[cls], per_value[cls] = fit(p, delayed)
    # Counting: one kind timed with and without (the counts are a few passes more, and a read back per pass).
    probe = next(p for p, _d in kinds.values() if p.recipe is not None)
    with_counts = fit(probe, False, counting=True)
    without = fit(probe, False)
    count_pass_s, count_value_s = (max(a - b, 0.0) for a, b in zip(with_counts, without, strict=True))
    # The quantized layer's own Python: a tiny model's step with a recipe that quantizes nothing, over the plain one.
    with _quiet_grads():
        x = torch.randn(8, PROBE_FEATURES, device=device)
    steps = []
    for quantized in (False, True):
        with _quiet_grads():
            model = _build_mlp(PROBE_FEATURES, 16, 2).to(device)
        if quantized:
            lowp.quantize_model(model, TrainingRecipe("fp32", "FP32", None, None, None))

        def step(m: Any = model) -> None:
            m(x).sum().backward()

        step()
        steps.append(_best_time(step, device, repeats=5))
    return {
        "lowp_pass_s": fixed,
        "lowp_value_s": per_value,
        "lowp_layer_s": max(steps[1] - steps[0], 0.0) / 3,
        "count_pass_s": count_pass_s,
        "count_value_s": count_value_s,
    }
