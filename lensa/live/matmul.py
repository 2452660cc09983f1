"""The matmul benchmark: one n x n product per precision, in TFLOP/s, on this machine's CPU or GPU."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from lensa.live.config import ShouldStop
from lensa.live.device import resolve_device
from lensa.live.errors import LiveError
from lensa.live.slot import run_slot
from lensa.live.torch_utils import _fp32_matmul_precision, _oom_as_live_error, _sync

if TYPE_CHECKING:
    import torch

MATMUL_MODES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")


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


def _stop_if_asked(should_stop: ShouldStop | None) -> None:
    if should_stop is not None and should_stop():
        raise LiveError("cancelled", "The matmul benchmark was stopped before it finished.")


def _not_applicable(mode: str, device: str) -> str | None:
    """Why ``mode`` cannot be measured on ``device``, or None when it can."""
    import torch

    if mode == "tf32" and device == "cpu":
        return "TF32 is a GPU tensor-core format (Ampere and newer); CPUs have no TF32 mode."
    if mode == "tf32" and torch.cuda.get_device_capability()[0] < 8:
        return "TF32 needs an Ampere or newer GPU (compute capability 8.0+)."
    if mode == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return "This GPU has no native BF16 (it needs Ampere, compute capability 8.0, or newer)."
    return None


def _time_products(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    repeats: int,
    warmup: int,
    device: str,
    should_stop: ShouldStop | None,
) -> tuple[list[float], int]:
    """Seconds per product ``a @ b``, ``repeats`` times, each the mean of a batch of products; and the batch."""
    import torch

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
        _stop_if_asked(should_stop)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.matmul(a, b, out=out)
        _sync(device)
        times.append((time.perf_counter() - t0) / inner)
    return times, inner


def _matmul_mode(
    mode: str, n: int, repeats: int, warmup: int, device: str, should_stop: ShouldStop | None
) -> MatmulRow:
    import torch

    _stop_if_asked(should_stop)
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
    reason = _not_applicable(mode, device)
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
        times, inner = _time_products(a, b, out, repeats, warmup, device, should_stop)
    median = statistics.median(times)
    row.update({"applicable": True, "median_s": median, "tflops": 2.0 * n**3 / median / 1e12, "runs": repeats * inner})
    if device == "cpu" and mode == "fp16":
        row["reason"] = "Runs on the CPU's vector units; there are no FP16 matrix units unless the CPU has amx_fp16."
    return row
