"""Small torch helpers every run shares: dtypes, device synchronisation, freeing memory, out-of-memory as a
:class:`~lensa.live.LiveError`, the FP32 matmul precision. Torch is imported inside each function."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lensa.live.errors import LiveError

if TYPE_CHECKING:
    import torch


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
