"""Live runs: the same small model trained in FP32, FP16 and BF16 on this machine's CPU or GPU.

This is the only part of ``lensa`` that uses PyTorch, and it imports torch
lazily (inside functions), so ``import lensa.live`` stays cheap and works
where torch is missing until a run is asked for.

The task follows the article seed: synthetic binary classification (inputs
drawn from a standard normal, label = 1 when the features sum to more than
0), an MLP, ``BCEWithLogitsLoss`` and Adam. Every arm gets the same data and
the same initial weights. The training step is the PyTorch AMP recipe::

    with ctx:                              # nullcontext() or torch.autocast(device, dtype)
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()          # GradScaler(device, enabled=dtype is float16)
    scaler.unscale_(optimizer)             # only when clipping: clip the true gradients
    clip_grad_norm_(params, max_norm)
    scaler.step(optimizer)                 # skipped when a gradient is inf or NaN
    scaler.update()

Public API
----------
- :class:`RunConfig` (``validate``, ``clamped``, ``estimate_seconds``), :data:`LIMITS`,
  :data:`MAX_RUN_SECONDS`, :func:`suggested_config`, :func:`config_fields`
- :func:`compare` -> :class:`Comparison` of :class:`ArmResult`; :func:`speedup`,
  :func:`comparison_rows`, :func:`rows_to_csv`
- :func:`matmul_benchmark` -> list of :class:`MatmulRow`
- :func:`gradscaler_trace` -> list of :class:`TraceStep`; :func:`trace_rows`
- :func:`device_info` -> :class:`DeviceInfo`; :func:`resolve_device`
- :func:`is_busy`, :func:`run_slot`, :class:`LiveError`

The app never calls these in its server process: :mod:`lensa.worker` runs
them in a separate, lower-priority process, so torch stays out of the server.

The first run in a process pays about 2 s of one-off set-up (torch and
oneDNN initialisation) on top of its own time.

Units: seconds (``*_s``), bytes (``*_bytes``), FLOP and FLOP/s; TFLOP/s in
benchmark rows. One run at a time per process: :func:`compare`,
:func:`matmul_benchmark` and :func:`gradscaler_trace` each hold the run slot
and fail with ``LiveError(kind="busy")`` when another thread holds it.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import math
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    import torch

ErrorKind = Literal["busy", "no_cuda", "oom", "cancelled", "invalid", "crashed"]
Progress = Callable[[float, str], None]
ShouldStop = Callable[[], bool]

ARMS: tuple[str, ...] = ("fp32", "fp16", "bf16")
ARM_LABELS: dict[str, str] = {
    "fp32": "FP32 baseline",
    "fp16": "FP16 autocast + GradScaler",
    "bf16": "BF16 autocast",
}
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
MATMUL_MODES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")


class LiveError(Exception):
    """The one error a live run raises on purpose.

    ``kind`` is one of ``"busy"`` (another run holds the slot), ``"no_cuda"``
    (CUDA asked for but absent), ``"oom"`` (the device ran out of memory;
    memory was freed before raising), ``"cancelled"`` (``should_stop`` asked a
    benchmark or trace to stop; :func:`compare` returns a cancelled
    :class:`Comparison` instead), ``"invalid"`` (a setting out of range) and
    ``"crashed"`` (raised by :mod:`lensa.worker` when the process running
    the call died). The app's pages also get ``"busy"`` from the worker's
    queue when it is full or a job waited too long.
    ``message`` is plain English, fit to show a learner as it is.
    """

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"LiveError(kind={self.kind!r}, message={self.message!r})"


# --- configuration ------------------------------------------------------------

LIMITS: dict[str, tuple[float, float]] = {
    "width": (8, 4096),
    "depth": (1, 8),
    "batch_size": (8, 16384),
    "features": (2, 2048),
    "steps": (1, 1000),
    "warmup_steps": (1, 50),
    "lr": (1e-5, 1.0),
    "clip_grad_norm": (0.01, 100.0),
    "eval_size": (64, 16384),
    "seed": (0, 2**31 - 1),
}
"""Inclusive (min, max) of every numeric :class:`RunConfig` field.

``clip_grad_norm`` may also be None (no clipping). On their own these ranges
do not bound the run time (the largest width times the largest batch is a
lot of work), so :meth:`RunConfig.validate` also refuses a run whose
:meth:`RunConfig.estimate_seconds` is over :data:`MAX_RUN_SECONDS`.
"""

MAX_RUN_SECONDS: dict[str, float] = {"cpu": 30.0, "cuda": 60.0}
"""Longest estimated run, all arms together (seconds), per device kind."""


@dataclass(frozen=True)
class CostModel:
    """A deliberately pessimistic time model of one training arm.

    Per step: matmul FLOP / ``flop_per_s`` of the arm's precision, plus
    ``param_step_s`` per parameter (optimizer, 16-bit weight casts,
    zero_grad, clipping: memory-bound work that dominates small batches),
    plus ``step_s`` + ``layer_step_s`` per Linear layer (Python and kernel
    launches). Per arm: the FP32 evaluation pass and ``arm_s`` of set-up.
    """

    flop_per_s: dict[str, float]
    param_step_s: float
    step_s: float
    layer_step_s: float
    arm_s: float


COST_MODELS: dict[str, CostModel] = {
    # Measured on the reference 2-core Xeon with AMX (torch 2.13, CPU): training reaches ~0.2 TFLOP/s in FP32
    # and FP16, ~0.6 in BF16; 6-10 ns per parameter per step; ~0.5 ms + 0.1 ms per layer of overhead. Rates are
    # set below those, and BF16 is costed like FP32 because CPUs without AMX run it no faster.
    "cpu": CostModel({"fp32": 1.4e11, "fp16": 1.4e11, "bf16": 1.4e11}, 1.2e-8, 5.0e-4, 1.5e-4, 0.2),
    # An A100-class GPU: ~15 TFLOP/s reached in FP32 (no TF32), ~100 in FP16/BF16 on tensor cores.
    "cuda": CostModel({"fp32": 1.5e13, "fp16": 1.0e14, "bf16": 1.0e14}, 2.0e-11, 3.0e-4, 5.0e-5, 0.5),
}
"""The :class:`CostModel` per device kind behind :meth:`RunConfig.estimate_seconds`."""

TRAIN_SET_BYTES: dict[str, int] = {"cpu": 64 * 2**20, "cuda": 2**30}
"""Cap on the pre-generated training set per device (FP32 inputs and labels, bytes); past it, batches repeat."""

_INT_FIELDS = ("width", "depth", "batch_size", "features", "steps", "warmup_steps", "eval_size", "seed")


@dataclass(frozen=True)
class RunConfig:
    """One live comparison's settings.

    The model is an MLP: ``features`` inputs, ``depth`` hidden layers of
    ``width`` units (Linear + ReLU each), one output logit. Each training step
    takes the next batch of ``batch_size`` samples from a training set drawn
    once (:meth:`train_batches` batches, so usually every step sees new
    samples and the model cannot just memorise one batch); accuracy is
    measured on ``eval_size`` further samples. Warm-up steps run before the
    clock starts and are not part of the recorded steps.
    The defaults are sized for a CPU: a few seconds for all three arms, with a
    clear BF16 speed-up where the CPU has bf16 matrix units (AMX).
    """

    width: int = 512
    depth: int = 3
    batch_size: int = 1024
    features: int = 64
    steps: int = 60
    warmup_steps: int = 3
    lr: float = 1e-3
    clip_grad_norm: float | None = 1.0
    eval_size: int = 4096
    seed: int = 0
    device: str = "auto"

    def matmul_macs_per_sample(self) -> int:
        """Multiply-adds of one sample's forward pass through the Linear layers."""
        return self.features * self.width + (self.depth - 1) * self.width * self.width + self.width

    def parameters(self) -> int:
        """Number of trainable parameters (weights and biases)."""
        return self.matmul_macs_per_sample() + self.depth * self.width + 1

    def train_flop(self) -> float:
        """FLOP of one arm's training, warm-up included: 6 x multiply-adds x samples x steps.

        2 FLOP per multiply-add forward and 4 backward, the usual estimate
        (see :mod:`lensa.speed`); elementwise work and the optimizer are left
        out, so real runs do a little more.
        """
        return 6.0 * self.matmul_macs_per_sample() * self.batch_size * (self.steps + self.warmup_steps)

    def train_batches(self, device_kind: str = "cpu") -> int:
        """Distinct training batches: one per step, up to :data:`TRAIN_SET_BYTES` of data (then reused in epochs)."""
        per_batch = self.batch_size * (self.features + 1) * 4
        return max(1, min(self.steps, TRAIN_SET_BYTES[device_kind] // per_batch))

    def estimate_seconds(self, device_kind: str | None = None, arms: Sequence[str] = ARMS) -> float:
        """Pessimistic estimate (seconds) of a :func:`compare` call over ``arms``, warm-up and evaluation included.

        From :data:`COST_MODELS`; real runs on the reference CPU take about
        half to two thirds of it. ``device_kind`` None resolves ``self.device``.
        """
        arms = _check_arms(arms)
        model = COST_MODELS[_device_kind(device_kind, self.device)]
        per_step_fixed = self.parameters() * model.param_step_s + model.step_s + model.layer_step_s * (self.depth + 1)
        step_flop = 6.0 * self.matmul_macs_per_sample() * self.batch_size
        eval_s = 2.0 * self.matmul_macs_per_sample() * self.eval_size / model.flop_per_s["fp32"]
        total = 0.0
        for arm in arms:
            per_step = step_flop / model.flop_per_s[arm] + per_step_fixed
            total += (self.steps + self.warmup_steps) * per_step + eval_s + model.arm_s
        return total

    def validate(self, device_kind: str | None = None, arms: Sequence[str] = ARMS) -> RunConfig:
        """Return ``self`` when every field is in :data:`LIMITS` and the run fits :data:`MAX_RUN_SECONDS`.

        ``device_kind`` ("cpu" or "cuda") chooses the time model; None
        resolves ``self.device`` (which imports torch for ``"auto"``). Raises
        ``LiveError(kind="invalid")`` naming the first field out of range or
        the estimated time, or ``kind="no_cuda"`` for ``device="cuda"``
        without CUDA. Needs no torch when ``device_kind`` is given.
        """
        problems = _field_problems(self)
        if problems:
            raise LiveError("invalid", problems[0])
        kind = _device_kind(device_kind, self.device)
        need, limit = self.estimate_seconds(kind, arms), MAX_RUN_SECONDS[kind]
        if need > limit:
            raise LiveError(
                "invalid",
                f"This run would take about {need:.0f} s on the {kind.upper()}, more than the {limit:.0f} s allowed. "
                "Lower the width, depth, batch size or number of steps.",
            )
        return self

    def clamped(self, device_kind: str | None = None, arms: Sequence[str] = ARMS) -> RunConfig:
        """A copy with every numeric field moved into :data:`LIMITS`, then steps cut to fit :data:`MAX_RUN_SECONDS`.

        Non-integers in integer fields are rounded. Raises
        ``LiveError(kind="invalid")`` for an unknown device or a non-number,
        and when even one step is over the time limit (then width, depth or
        batch size must come down, which this helper does not guess).
        """
        if self.device not in DEVICES:
            raise LiveError("invalid", f"device must be one of {', '.join(DEVICES)} (got {self.device!r}).")
        changes: dict[str, Any] = {}
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            if value is None and name == "clip_grad_norm":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise LiveError("invalid", f"{name} must be a number (got {value!r}).")
            clipped = min(max(value, lo), hi)
            changes[name] = round(clipped) if name in _INT_FIELDS else float(clipped)
        out = replace(self, **changes)
        kind = _device_kind(device_kind, out.device)
        limit = MAX_RUN_SECONDS[kind]
        # The estimate is affine in steps: solve for the most steps that fit.
        at_one = replace(out, steps=1).estimate_seconds(kind, arms)
        per_step = replace(out, steps=2).estimate_seconds(kind, arms) - at_one
        if at_one > limit:
            raise LiveError(
                "invalid",
                "Even one training step of this model is over the time limit. Lower the width, depth, batch size, "
                "evaluation samples or warm-up steps.",
            )
        fit = 1 + int((limit - at_one) // per_step)
        return replace(out, steps=min(out.steps, fit))


def _device_kind(device_kind: str | None, device: str) -> str:
    if device_kind is None:
        return resolve_device(device)
    if device_kind not in COST_MODELS:
        raise LiveError("invalid", f"device_kind must be 'cpu' or 'cuda' (got {device_kind!r}).")
    return device_kind


def _field_problems(cfg: RunConfig) -> list[str]:
    out = []
    if cfg.device not in DEVICES:
        out.append(f"device must be one of {', '.join(DEVICES)} (got {cfg.device!r}).")
    for name, (lo, hi) in LIMITS.items():
        value = getattr(cfg, name)
        if name == "clip_grad_norm" and value is None:
            continue
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int):
                out.append(f"{name} must be a whole number (got {value!r}).")
                continue
        elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            out.append(f"{name} must be a finite number (got {value!r}).")
            continue
        if not lo <= value <= hi:
            out.append(f"{name} must be between {lo:g} and {hi:g} (got {value:g}).")
    return out


GPU_CONFIG = RunConfig(width=4096, depth=4, batch_size=8192, features=256, steps=100, warmup_steps=5, lr=1e-4)
"""A comparison sized for a data-centre GPU: 2.5 TFLOP per step, seconds per arm on an A100/H100-class GPU."""


def suggested_config(device_kind: str) -> RunConfig:
    """The default :class:`RunConfig` for ``"cpu"`` (a few seconds) or :data:`GPU_CONFIG` for ``"cuda"``."""
    if device_kind == "cuda":
        return replace(GPU_CONFIG, device="cuda")
    return RunConfig(device="cpu")


# --- device --------------------------------------------------------------------


def resolve_device(device: str = "auto") -> str:
    """``"cpu"`` or ``"cuda"`` for a requested ``"auto"``/``"cpu"``/``"cuda"`` (imports torch).

    ``"auto"`` picks CUDA when present. Raises ``LiveError(kind="no_cuda")``
    for ``"cuda"`` without a usable GPU, ``kind="invalid"`` for anything else.
    """
    if device not in DEVICES:
        raise LiveError("invalid", f"device must be one of {', '.join(DEVICES)} (got {device!r}).")
    if device == "cpu":
        return "cpu"
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise LiveError(
            "no_cuda",
            "CUDA was asked for, but this machine has no usable NVIDIA GPU (or this PyTorch build has no CUDA). "
            "Choose the CPU instead.",
        )
    return "cuda" if has_cuda else "cpu"


@dataclass(frozen=True)
class DeviceInfo:
    """What hardware a run uses.

    ``bf16_autocast``: BF16 autocast runs at all (always on CPU; on CUDA
    when ``torch.cuda.is_bf16_supported()``). ``bf16_fast``: the hardware has
    BF16 math units (CUDA: compute capability 8.0+; CPU: the ``amx_bf16`` or
    ``avx512_bf16`` flag), None when unknown (no ``/proc/cpuinfo``).
    ``bf16_matrix_units``: AMX tiles with BF16 (CPU), tensor cores with BF16
    (CUDA 8.0+). ``memory_bytes``: GPU memory, or the machine's RAM on CPU
    (None when unknown).
    """

    device: str
    name: str
    torch_version: str
    memory_bytes: int | None = None
    cuda_version: str | None = None
    compute_capability: str | None = None
    cores: int | None = None
    threads: int | None = None
    torch_threads: int | None = None
    cpu_flags: tuple[str, ...] = ()
    bf16_autocast: bool = True
    bf16_fast: bool | None = None
    bf16_matrix_units: bool | None = None
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line of plain text, e.g. for a caption."""
        parts = [self.name]
        if self.device == "cuda":
            if self.memory_bytes:
                parts.append(f"{self.memory_bytes / 2**30:.0f} GiB")
            parts.append(f"compute capability {self.compute_capability}")
        else:
            if self.cores:
                parts.append(f"{self.cores} cores")
            if self.threads:
                parts.append(f"{self.threads} threads")
        units = {True: "BF16 matrix units", False: "no BF16 matrix units", None: "BF16 units unknown"}
        parts.append(units[self.bf16_matrix_units])
        parts.append(f"torch {self.torch_version}")
        return ", ".join(parts)


CPU_FLAGS_OF_INTEREST = ("amx_bf16", "amx_fp16", "amx_tile", "avx512_bf16", "avx512_fp16", "avx512f", "avx2")


def _read_cpuinfo(path: str) -> tuple[str | None, int | None, set[str]] | None:
    """(model name, physical cores, flags) from a /proc/cpuinfo-style file; None when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    name = None
    flags: set[str] = set()
    cores: set[tuple[str, str]] = set()
    physical = core = None
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if physical is not None and core is not None:
                cores.add((physical, core))
            physical = core = None
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and name is None:
            name = value
        elif key == "flags" and not flags:
            flags = set(value.split())
        elif key == "physical id":
            physical = value
        elif key == "core id":
            core = value
    return name, (len(cores) or None), flags


def _meminfo_bytes(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def device_info(device: str = "auto", *, cpuinfo_path: str = "/proc/cpuinfo") -> DeviceInfo:
    """Describe the device a run on ``device`` would use (imports torch).

    Never fails for a missing or unreadable ``cpuinfo_path``: the CPU fields
    it would fill become None and a note says so. Raises
    ``LiveError(kind="no_cuda")`` for ``"cuda"`` without CUDA.
    """
    import torch

    kind = resolve_device(device)
    if kind == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        major, minor = props.major, props.minor
        bf16 = bool(torch.cuda.is_bf16_supported())  # emulation counts: autocast runs, if slowly
        return DeviceInfo(
            device="cuda",
            name=props.name,
            torch_version=str(torch.__version__),  # a TorchVersion would need torch to unpickle
            memory_bytes=int(props.total_memory),
            cuda_version=torch.version.cuda,
            compute_capability=f"{major}.{minor}",
            bf16_autocast=bf16,
            bf16_fast=major >= 8,
            bf16_matrix_units=major >= 8,
            notes=() if major >= 8 else ("Before Ampere (8.0) there are no BF16 tensor cores; FP16 is the fast path.",),
        )
    parsed = _read_cpuinfo(cpuinfo_path)
    notes = []
    if parsed is None:
        name, cores, flags = (platform.processor() or platform.machine() or "CPU"), None, set()
        fast = units = None
        notes.append(f"{cpuinfo_path} could not be read, so the CPU's bf16 support is unknown.")
    else:
        name, cores, flags = parsed
        name = name or platform.processor() or "CPU"
        units = "amx_bf16" in flags
        fast = units or "avx512_bf16" in flags
        if not fast:
            notes.append("No bf16 instructions: BF16 autocast runs, but emulated, often slower than FP32.")
        if not ({"amx_fp16", "avx512_fp16"} & flags):
            notes.append("No fp16 arithmetic instructions: FP16 autocast on this CPU is emulated and slow.")
    return DeviceInfo(
        device="cpu",
        name=name,
        torch_version=str(torch.__version__),  # a TorchVersion would need torch to unpickle
        memory_bytes=_meminfo_bytes(),
        cores=cores,
        threads=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        cpu_flags=tuple(f for f in CPU_FLAGS_OF_INTEREST if f in flags),
        bf16_autocast=True,
        bf16_fast=fast,
        bf16_matrix_units=units,
        notes=tuple(notes),
    )


# --- one run at a time ------------------------------------------------------------


class _RunSlot:
    """A process-wide lock that its holder may re-enter (the page may hold it around several calls)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def locked(self) -> bool:
        return self._lock.locked()

    @contextlib.contextmanager
    def hold(self, wait_s: float) -> Iterator[None]:
        me = threading.get_ident()
        # Only this thread ever sets _owner to its own id, so reading it unlocked is safe.
        if self._owner == me:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        got = self._lock.acquire(timeout=wait_s) if wait_s > 0 else self._lock.acquire(blocking=False)
        if not got:
            waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
            raise LiveError(
                "busy",
                f"Another live run is in progress{waited}. Runs go one at a time, because two at once would "
                "share the processor and distort each other's timings. Try again when it has finished.",
            )
        self._owner, self._depth = me, 1
        try:
            yield
        finally:
            self._owner, self._depth = None, 0
            self._lock.release()


_SLOT = _RunSlot()


def is_busy() -> bool:
    """True while any thread of this process holds the run slot (never blocks)."""
    return _SLOT.locked()


def run_slot(wait_s: float = 0.0) -> contextlib.AbstractContextManager[None]:
    """Context manager holding the process-wide run slot.

    ``wait_s`` = 0 (default): fail at once with ``LiveError(kind="busy")``
    when another thread holds it; > 0: wait up to that many seconds first.
    The holding thread may nest it (and call :func:`compare` inside it).
    """
    if not (isinstance(wait_s, int | float) and math.isfinite(wait_s) and wait_s >= 0):
        raise LiveError("invalid", f"wait_s must be a number of seconds >= 0 (got {wait_s!r}).")
    return _SLOT.hold(float(wait_s))


# --- torch helpers ----------------------------------------------------------------


_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _dtype(arm: str) -> torch.dtype:
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[arm]


def _sync(device: str) -> None:
    """Wait for queued GPU work: CUDA calls return before the kernels finish, so clocks read early otherwise."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _free_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    # The CPU allocator raises a plain RuntimeError.
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


@contextlib.contextmanager
def _oom_as_live_error(device: str, what: str) -> Iterator[None]:
    """Turn an out-of-memory error into ``LiveError(kind="oom")`` after freeing what the run held."""
    failed = None
    try:
        yield
    except Exception as exc:
        if not _is_oom(exc):
            raise
        failed = str(exc).splitlines()[0][:200]
    # Outside the except block the traceback (and the frames holding the
    # run's tensors) is gone, so the memory can really be released.
    if failed is not None:
        _free_memory(device)
        raise LiveError(
            "oom",
            f"The {device.upper()} ran out of memory during {what}; the memory has been freed. "
            f"Try a smaller width, batch size or depth. ({failed})",
        )


@contextlib.contextmanager
def _fp32_matmul_precision(device: str, precision: str) -> Iterator[None]:
    """Set ``torch.set_float32_matmul_precision`` (TF32 on or off) for a block, then restore it."""
    import torch

    before = torch.get_float32_matmul_precision()
    allow_before = torch.backends.cuda.matmul.allow_tf32 if device == "cuda" else None
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
        if allow_before is not None:
            torch.backends.cuda.matmul.allow_tf32 = allow_before


def _build_mlp(features: int, width: int, depth: int) -> torch.nn.Sequential:
    from torch import nn

    layers: list[nn.Module] = [nn.Linear(features, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def _make_data(n: int, features: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    x = torch.randn(n, features, generator=generator)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    return x, y


def _initial_state(cfg: RunConfig) -> dict[str, torch.Tensor]:
    """The seeded initial weights every arm starts from, on the CPU."""
    import torch

    # fork_rng keeps the caller's global RNG state untouched by our seeding.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = _build_mlp(cfg.features, cfg.width, cfg.depth)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- the comparison -----------------------------------------------------------------


@dataclass(frozen=True)
class ArmResult:
    """One arm of a :class:`Comparison`.

    Per step (``steps`` entries each): ``losses`` (the training loss the arm
    computed, in FP32), ``loss_scales`` (the GradScaler scale used for that
    step's backward pass; None for arms without a scaler), ``skipped`` (the
    optimizer step was skipped because a gradient was inf or NaN; GradScaler
    then halves the scale, which is how it is detected without slowing the
    loop). ``time_s`` covers only the recorded steps, after
    ``warmup_steps`` untimed warm-up steps, with the device synchronised
    before each clock read; progress callbacks are outside it.
    ``peak_memory_bytes``: CUDA ``max_memory_allocated`` over the timed
    steps (data, weights and optimizer state included); None on CPU.
    ``saved_for_backward_bytes``: bytes of the distinct tensors autograd kept
    for the backward pass in one step (activations and 16-bit weight copies,
    not the FP32 parameters), measured on every device.
    ``layer_output_dtypes``: the dtype each Linear layer produced inside the
    arm's autocast context, in layer order; ``loss_dtype``: the loss's dtype.
    ``accuracy`` (0..1) and ``eval_loss`` are measured in FP32 on held-out
    samples after training.
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


def _train_arm(
    arm: str,
    cfg: RunConfig,
    device: str,
    data: tuple[torch.Tensor, ...],
    init_state: dict[str, torch.Tensor],
    tick: Callable[[int, str], None],
) -> ArmResult:
    import torch

    x, y, x_eval, y_eval = data
    pool = x.shape[0]
    dtype = _dtype(arm)
    model = _build_mlp(cfg.features, cfg.width, cfg.depth)
    model.load_state_dict(init_state)
    model.to(device)
    criterion = torch.nn.BCEWithLogitsLoss()
    ctx = contextlib.nullcontext() if arm == "fp32" else torch.autocast(device_type=device, dtype=dtype)
    one = torch.ones((), device=device)

    def fresh() -> tuple[torch.optim.Optimizer, torch.amp.GradScaler]:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        # Only FP16 needs loss scaling; a disabled scaler passes everything through.
        return opt, torch.amp.GradScaler(device, enabled=dtype is torch.float16)

    def make_step(opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> Callable[[int], torch.Tensor]:
        def step(i: int) -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            with ctx:
                loss = criterion(model(x[i % pool]), y[i % pool])
            scaler.scale(loss).backward()
            if cfg.clip_grad_norm is not None:
                scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad_norm)
            scaler.step(opt)
            scaler.update()
            return loss

        return step

    # Warm-up: allocator, kernel choice and AMX/cuBLAS set-up happen here, off the clock.
    opt, scaler = fresh()
    step = make_step(opt, scaler)
    tick(0, f"{arm}: warm-up")
    layer_dtypes, loss_dtype, saved_bytes = _probe_step(model, lambda: step(0))
    tick(1, f"{arm}: warm-up")
    for i in range(1, cfg.warmup_steps):
        step(i)
        tick(1, f"{arm}: warm-up {i + 1}/{cfg.warmup_steps}")
    # Start the measured run from the same initial weights and a fresh optimizer and scaler.
    model.load_state_dict(init_state)
    del opt, scaler, step
    opt, scaler = fresh()
    step = make_step(opt, scaler)
    scaled = scaler.is_enabled()

    n = cfg.steps
    losses = torch.empty(n, device=device)
    scale_used = torch.empty(n, device=device)
    scale_after = torch.empty(n, device=device)
    if device == "cuda":
        _free_memory(device)
        torch.cuda.reset_peak_memory_stats()
    chunk = max(1, math.ceil(n / 20))
    elapsed = 0.0
    done = 0
    while done < n:
        _sync(device)
        t0 = time.perf_counter()
        for i in range(done, min(n, done + chunk)):
            # Device-side copies, read once at the end: .item() per step would stall the GPU.
            if scaled:
                scale_used[i] = scaler.scale(one)
            losses[i] = step(i).detach()
            if scaled:
                scale_after[i] = scaler.scale(one)
        _sync(device)
        elapsed += time.perf_counter() - t0
        advanced = min(n, done + chunk) - done
        done += advanced
        tick(advanced, f"{arm}: step {done}/{n}")
    peak = int(torch.cuda.max_memory_allocated()) if device == "cuda" else None

    with torch.no_grad():
        logits = model(x_eval)
        eval_loss = float(criterion(logits, y_eval))
        accuracy = float(((logits > 0).float() == y_eval).float().mean())
    loss_list = [float(v) for v in losses.tolist()]
    if scaled:
        used = [float(v) for v in scale_used.tolist()]
        after = scale_after.tolist()
        # GradScaler multiplies the scale by backoff_factor (< 1) exactly when it skips a step.
        skipped = [a < u for u, a in zip(used, after, strict=True)]
        scales: list[float | None] = list(used)
    else:
        skipped = [False] * n
        scales = [None] * n
    return ArmResult(
        arm=arm,
        label=ARM_LABELS[arm],
        compute_dtype=_DTYPE_NAMES[arm],
        losses=tuple(loss_list),
        loss_scales=tuple(scales),
        skipped=tuple(skipped),
        time_s=elapsed,
        time_per_step_s=elapsed / n,
        final_loss=loss_list[-1],
        eval_loss=eval_loss,
        accuracy=accuracy,
        peak_memory_bytes=peak,
        memory_note="torch.cuda.max_memory_allocated over the timed steps"
        if peak is not None
        else "not measured on CPU (PyTorch keeps no peak statistics for CPU memory)",
        saved_for_backward_bytes=saved_bytes,
        layer_output_dtypes=tuple(layer_dtypes),
        loss_dtype=loss_dtype,
        skipped_steps=sum(skipped),
        warmup_steps=cfg.warmup_steps,
    )


def _check_arms(arms: Sequence[str]) -> tuple[str, ...]:
    arms = tuple(arms)
    if not arms:
        raise LiveError("invalid", "Choose at least one arm (fp32, fp16 or bf16).")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise LiveError("invalid", f"Unknown arm {unknown[0]!r}; choose from {', '.join(ARMS)}.")
    if len(set(arms)) != len(arms):
        raise LiveError("invalid", "Each arm may be asked for only once.")
    return arms


def compare(
    config: RunConfig | None = None,
    arms: Sequence[str] = ARMS,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
) -> Comparison:
    """Train the same model on the same data once per arm and measure each.

    Arms: ``"fp32"`` (baseline, no autocast; TF32 is off for the whole call
    so FP32 means FP32), ``"fp16"`` (autocast + GradScaler), ``"bf16"``
    (autocast, no scaler). An arm the device cannot run is listed in
    ``Comparison.not_run`` with the reason. ``progress(fraction, message)``
    is called with 0..1 as work proceeds (outside the timed region).
    ``should_stop()`` is polled between chunks of steps; when it returns
    True the call returns a Comparison with ``cancelled=True`` and the arms
    finished so far. Holds the run slot (``LiveError(kind="busy")`` if taken).

    Raises ``LiveError`` with kind ``"invalid"`` (config or arms),
    ``"no_cuda"`` or ``"oom"``.
    """
    cfg = config or RunConfig()
    arms = _check_arms(arms)
    device = resolve_device(cfg.device)
    cfg.validate(device, arms)
    with run_slot(), _oom_as_live_error(device, "the comparison"), _fp32_matmul_precision(device, "highest"):
        return _compare(cfg, arms, device, progress, should_stop)


def _compare(
    cfg: RunConfig,
    arms: tuple[str, ...],
    device: str,
    progress: Progress | None,
    should_stop: ShouldStop | None,
) -> Comparison:
    import torch

    start = time.perf_counter()
    device_name = torch.cuda.get_device_name() if device == "cuda" else device_info("cpu").name
    not_run = {a: r for a in arms if (r := _arm_skip_reason(a, device))}
    to_run = [a for a in arms if a not in not_run]
    notes: list[str] = []
    if device == "cpu":
        notes.append(f"CPU run with {torch.get_num_threads()} threads; peak memory is not measured on CPU.")

    gen = torch.Generator().manual_seed(cfg.seed)
    pool = cfg.train_batches(device)
    x, y = _make_data(pool * cfg.batch_size, cfg.features, gen)
    x, y = x.view(pool, cfg.batch_size, cfg.features), y.view(pool, cfg.batch_size, 1)
    x_eval, y_eval = _make_data(cfg.eval_size, cfg.features, gen)
    data = tuple(t.to(device) for t in (x, y, x_eval, y_eval))
    init_state = _initial_state(cfg)

    total = max(1, len(to_run) * (cfg.steps + cfg.warmup_steps))
    units = 0

    def tick(advance: int, message: str) -> None:
        nonlocal units
        units += advance
        if progress is not None:
            progress(min(1.0, units / total), message)
        if should_stop is not None and should_stop():
            raise _Cancelled

    results: dict[str, ArmResult] = {}
    cancelled = False
    try:
        if should_stop is not None and should_stop():
            raise _Cancelled
        for arm in to_run:
            results[arm] = _train_arm(arm, cfg, device, data, init_state, tick)
            _free_memory(device)
    except _Cancelled:
        cancelled = True
        left = [a for a in to_run if a not in results]
        if left:
            notes.append(f"Cancelled during the {left[0]} arm; it and any later arms ({', '.join(left)}) are left out.")
        _free_memory(device)
    if progress is not None:
        progress(units / total if cancelled else 1.0, "cancelled" if cancelled else "done")
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


def speedup(comparison: Comparison, arm: str) -> float | None:
    """FP32 arm's time / ``arm``'s time (>1 means faster than FP32); None when either is missing."""
    base, other = comparison.arms.get("fp32"), comparison.arms.get(arm)
    if base is None or other is None or other.time_s <= 0:
        return None
    return base.time_s / other.time_s


class ComparisonRow(TypedDict):
    """One row of the article-style table; None where a value was not measured."""

    arm: str
    label: str
    time_s: float
    time_per_step_ms: float
    final_loss: float
    accuracy: float
    peak_memory_mb: float | None
    saved_for_backward_mb: float
    skipped_steps: int
    speedup_vs_fp32: float | None


def comparison_rows(comparison: Comparison) -> list[ComparisonRow]:
    """One row per finished arm: time (s), ms per step, final loss, accuracy, memory (MB = 10**6 bytes), speed-up."""
    rows: list[ComparisonRow] = []
    for name, a in comparison.arms.items():
        rows.append(
            ComparisonRow(
                arm=name,
                label=a.label,
                time_s=a.time_s,
                time_per_step_ms=a.time_per_step_s * 1e3,
                final_loss=a.final_loss,
                accuracy=a.accuracy,
                peak_memory_mb=None if a.peak_memory_bytes is None else a.peak_memory_bytes / 1e6,
                saved_for_backward_mb=a.saved_for_backward_bytes / 1e6,
                skipped_steps=a.skipped_steps,
                speedup_vs_fp32=speedup(comparison, name),
            )
        )
    return rows


def rows_to_csv(rows: Sequence[dict[str, Any]] | Sequence[ComparisonRow] | Sequence[MatmulRow]) -> str:
    """CSV text (header from the first row's keys; None becomes an empty cell). Empty string for no rows."""
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0].keys()), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


# --- matmul benchmark -------------------------------------------------------------------

MATMUL_SIZE_LIMITS: dict[str, tuple[int, int]] = {"cpu": (64, 4096), "cuda": (64, 16384)}
"""Inclusive (min, max) square size n per device; 4096 keeps a CPU run under about 20 s."""
MATMUL_DEFAULT_SIZE: dict[str, int] = {"cpu": 2048, "cuda": 8192}
MATMUL_REPEATS_LIMITS = (1, 50)


class MatmulRow(TypedDict):
    """One mode of :func:`matmul_benchmark`; ``median_s`` and ``tflops`` are None when not applicable."""

    mode: str
    dtype: str
    device: str
    size: int
    applicable: bool
    reason: str
    median_s: float | None
    tflops: float | None
    runs: int


def matmul_benchmark(
    size: int | None = None,
    modes: Sequence[str] = MATMUL_MODES,
    repeats: int = 7,
    device: str = "auto",
    *,
    warmup: int = 2,
    should_stop: ShouldStop | None = None,
) -> list[MatmulRow]:
    """Throughput of one n x n by n x n matrix product per mode, in TFLOP/s = 2 n**3 / median seconds / 1e12.

    ``size`` None picks :data:`MATMUL_DEFAULT_SIZE` (2048 on CPU, 8192 on
    CUDA). A mode this machine only emulates is measured at the largest of
    size, size/2, ... whose one product takes at most
    :data:`MATMUL_PRODUCT_BUDGET_S` (each row's ``size`` says which). Each mode runs ``warmup`` untimed
    products, then ``repeats`` timed ones (each a batch of back-to-back
    products long enough, about 10 ms, for the clock; the device is
    synchronised before each clock read), and reports the median. ``"tf32"``
    is FP32 inputs with TF32 tensor cores allowed (CUDA, compute capability
    8.0+, only for that mode, restored after); ``"fp32"`` forces TF32 off. On
    CPU, TF32 is reported as not applicable. Holds the run slot. Raises
    ``LiveError`` with kind ``"invalid"``, ``"no_cuda"``, ``"oom"``,
    ``"busy"``, or ``"cancelled"`` when ``should_stop()`` turns True.
    """
    dev = resolve_device(device)
    lo, hi = MATMUL_SIZE_LIMITS[dev]
    n = MATMUL_DEFAULT_SIZE[dev] if size is None else size
    if isinstance(n, bool) or not isinstance(n, int) or not lo <= n <= hi:
        raise LiveError("invalid", f"size must be a whole number between {lo} and {hi} on {dev.upper()} (got {n!r}).")
    rlo, rhi = MATMUL_REPEATS_LIMITS
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not rlo <= repeats <= rhi:
        raise LiveError("invalid", f"repeats must be a whole number between {rlo} and {rhi} (got {repeats!r}).")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= 10:
        raise LiveError("invalid", f"warmup must be a whole number between 0 and 10 (got {warmup!r}).")
    modes = tuple(modes)
    bad = [m for m in modes if m not in MATMUL_MODES]
    if bad or not modes:
        raise LiveError("invalid", f"modes must be chosen from {', '.join(MATMUL_MODES)} (got {modes!r}).")
    with run_slot(), _oom_as_live_error(dev, "the matmul benchmark"):
        return [_matmul_mode(mode, n, repeats, warmup, dev, should_stop) for mode in modes]


MATMUL_PRODUCT_BUDGET_S = 1.0
"""Longest one timed product may take (seconds); slower modes are measured at a smaller size."""
_MATMUL_PROBE_SIZE = 256


def _size_within_budget(mode: str, n: int, dtype: Any, device: str, gen: Any) -> int:
    """The size to measure at: doubling from the probe size up to n while one product stays within the budget.

    Each step predicts the next size's time from the last one measured (8x per doubling), so a slow mode stops
    early and a fast one reaches n after a few short products.
    """
    import torch

    size = min(n, _MATMUL_PROBE_SIZE)
    while size < n:
        a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        torch.matmul(a, a)  # the first call at a size pays one-off set-up
        _sync(device)
        t0 = time.perf_counter()
        torch.matmul(a, a)
        _sync(device)
        if (time.perf_counter() - t0) * 8 > MATMUL_PRODUCT_BUDGET_S:
            break
        size *= 2
    return min(size, n)


def _matmul_mode(
    mode: str, n: int, repeats: int, warmup: int, device: str, should_stop: ShouldStop | None
) -> MatmulRow:
    import torch

    if should_stop is not None and should_stop():
        raise LiveError("cancelled", "The matmul benchmark was stopped before it finished.")
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
    row = MatmulRow(
        mode=mode,
        dtype=str(dtype).removeprefix("torch."),
        device=device,
        size=n,
        applicable=False,
        reason="",
        median_s=None,
        tflops=None,
        runs=0,
    )
    reason = None
    if mode == "tf32" and device == "cpu":
        reason = "TF32 is a GPU tensor-core format (Ampere and newer); CPUs have no TF32 mode."
    elif mode == "tf32" and torch.cuda.get_device_capability()[0] < 8:
        reason = "TF32 needs an Ampere or newer GPU (compute capability 8.0+)."
    elif mode == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        reason = "This GPU has no native BF16 (it needs Ampere, compute capability 8.0, or newer)."
    if reason:
        row["reason"] = reason
        return row

    gen = torch.Generator().manual_seed(0)
    with _fp32_matmul_precision(device, "high" if mode == "tf32" else "highest"):
        # A CPU without matrix units for a format emulates it, up to a thousand times slower (an FP16 2048 x 2048
        # product took 85-107 s on an AMD EPYC here): time one small product first and measure such a mode at the
        # largest size that keeps one product under MATMUL_PRODUCT_BUDGET_S. TFLOP/s is a rate, so it stays
        # comparable; the row records the size used.
        n = _size_within_budget(mode, n, dtype, device, gen)
        row["size"] = n
        a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        for _ in range(warmup):
            torch.matmul(a, b, out=out)
        _sync(device)
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        _sync(device)
        one = max(time.perf_counter() - t0, 1e-9)
        # Batch small products so each clock read spans ~10 ms, well above timer and launch noise.
        inner = min(1000, max(1, math.ceil(0.01 / one)))
        times = []
        for _ in range(repeats):
            if should_stop is not None and should_stop():
                raise LiveError("cancelled", "The matmul benchmark was stopped before it finished.")
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(inner):
                torch.matmul(a, b, out=out)
            _sync(device)
            times.append((time.perf_counter() - t0) / inner)
    median = statistics.median(times)
    row.update(applicable=True, median_s=median, tflops=2.0 * n**3 / median / 1e12, runs=repeats * inner)
    if device == "cpu" and mode == "fp16":
        row["reason"] = "Runs on the CPU's vector units; there are no FP16 matrix units unless the CPU has amx_fp16."
    return row


# --- GradScaler trace -------------------------------------------------------------------


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
    :func:`lensa.scaling.simulate` fed the ``found_inf`` pattern. Takes well
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


def trace_rows(trace: Sequence[TraceStep]) -> list[dict[str, Any]]:
    """The trace as plain dicts (one per step), e.g. for a table or :func:`rows_to_csv`."""
    return [asdict(s) for s in trace]


def config_fields() -> list[str]:
    """Names of the :class:`RunConfig` fields, in order (for building a form)."""
    return [f.name for f in fields(RunConfig)]
