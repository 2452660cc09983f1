"""Which device a run uses, and what it is: CUDA or the CPU, its name, memory and BF16 units (imports torch
only when asked)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from lensa.live.errors import LiveError

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")


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
    name: str | None
    cores: int | None
    flags: set[str]
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
