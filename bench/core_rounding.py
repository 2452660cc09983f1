"""Core rounding throughput: lensa.numerics.formats against torch's own casts on the same 10^7 float32 values.

    python bench/core_rounding.py [--n 10000000] [--repeats 9]

``quantize`` returns float64 values (its contract); ``cast`` returns the
format's own storage type, as ``torch.Tensor.to(dtype)`` does. Both are timed
against torch in the same run, interleaved, and the ratio is torch's time
divided by ours (1.0 = as fast as torch; the target is 0.5 for FP16 and BF16).

Then ``quantize(x, "fp16")`` against ``.to(torch.float16)`` with the same treatment of memory on both sides, on one
thread and on ``WORKERS``: *fresh memory* (every result kept until the series ends, and glibc asked to give back
what was freed before each call, so each call writes pages the system hands over new: both pay for the first touch
of their output, ours 80 MB of float64, torch's 20 MB), *results dropped* (as a loop calls them: glibc hands torch's
freed 20 MB back to the next call already mapped, while numpy's 80 MB arrays are unmapped when freed and mapped
again), and *into an output made once* (``quantize(..., out=)`` against ``Tensor.copy_``). One treatment after the
other; within one, torch and ours take turns.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import time

import numpy as np

from bench.common import WORKERS, median, publish, table, verdict

TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
TARGET = {"fp16": 0.5, "bf16": 0.5}


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times)


def _row(formats, torch, x, tx, name: str, tname: str, repeats: int) -> list[str]:
    tdtype = getattr(torch, tname)
    to_torch = lambda: tx.to(tdtype)  # noqa: E731
    quantize = lambda: formats.quantize(x, name, workers=WORKERS)  # noqa: E731
    cast = lambda: formats.cast(x, name, workers=WORKERS)  # noqa: E731
    for fn in (to_torch, quantize, cast):  # warm up all three
        fn()
    t_torch, t_quantize, t_cast = (timed(fn, repeats) for fn in (to_torch, quantize, cast))
    bits = np.uint8 if name.startswith("fp8") else np.uint16
    tbits = torch.uint8 if name.startswith("fp8") else torch.int16
    same = np.array_equal(cast().view(bits), to_torch().view(tbits).numpy().view(bits))
    target = TARGET.get(name)
    return [
        name,
        f"{t_torch * 1e3:.1f}",
        f"{t_cast * 1e3:.1f}",
        f"{t_torch / t_cast:.2f}×",
        f"{t_quantize * 1e3:.1f}",
        f"{t_torch / t_quantize:.2f}×",
        "bit-exact" if same else "DIFFERS",
        "—" if target is None else f"≥ {target}×: {verdict(t_torch / t_cast >= target)}",
    ]


def _give_back_freed_memory() -> None:
    """glibc's ``malloc_trim(0)``: memory freed earlier goes back to the system (where there is glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _fp16_fair(formats, torch, x, tx, repeats: int) -> list[list[str]]:
    """FP16 quantize against torch's cast, per thread count and memory treatment (see the module's text)."""
    rows = []
    before = torch.get_num_threads()
    for threads in sorted({1, WORKERS}):
        torch.set_num_threads(threads)
        out16 = torch.zeros(x.shape, dtype=torch.float16)
        out64 = np.zeros(x.shape)
        arms = {
            ("fresh memory", "torch"): lambda: tx.to(torch.float16),
            ("fresh memory", "ours"): lambda t=threads: formats.quantize(x, "fp16", workers=t),
            ("results dropped", "torch"): lambda: tx.to(torch.float16),
            ("results dropped", "ours"): lambda t=threads: formats.quantize(x, "fp16", workers=t),
            ("into an output made once", "torch"): lambda o=out16: o.copy_(tx),
            ("into an output made once", "ours"): lambda t=threads, o=out64: formats.quantize(
                x, "fp16", workers=t, out=o
            ),
        }
        times: dict[tuple[str, str], list[float]] = {k: [] for k in arms}
        cpu: dict[tuple[str, str], list[float]] = {k: [] for k in arms}  # the process's, all threads, faults too
        # One treatment at a time (results kept for one series would change what the next finds free), torch and
        # ours taking turns within it.
        for treatment in ("fresh memory", "results dropped", "into an output made once"):
            pair = [(key, fn) for key, fn in arms.items() if key[0] == treatment]
            for _, fn in pair:  # warm up
                fn()
            kept: list[object] = []
            for _ in range(repeats):
                for key, fn in pair:
                    if treatment == "fresh memory":
                        _give_back_freed_memory()  # so that neither allocator hands back pages touched before
                    t0, c0 = time.perf_counter(), time.process_time()
                    result = fn()
                    times[key].append(time.perf_counter() - t0)
                    cpu[key].append(time.process_time() - c0)
                    if treatment == "fresh memory":
                        kept.append(result)
                    del result
            del kept
            _give_back_freed_memory()
        for treatment in ("fresh memory", "results dropped", "into an output made once"):
            t_torch, t_ours = median(times[treatment, "torch"]), median(times[treatment, "ours"])
            c_torch, c_ours = median(cpu[treatment, "torch"]), median(cpu[treatment, "ours"])
            ratio = t_torch / t_ours
            rows.append(
                [
                    str(threads),
                    treatment,
                    f"{t_torch * 1e3:.1f}",
                    f"{t_ours * 1e3:.1f}",
                    f"{ratio:.2f}×",
                    f"{c_torch * 1e3:.1f} / {c_ours * 1e3:.1f} ({c_torch / c_ours:.2f}×)",
                    f"≥ 0.5×: {verdict(ratio >= 0.5)}",
                ]
            )
    torch.set_num_threads(before)
    return rows


def main() -> None:
    import torch

    from lensa.numerics import formats

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(args.n).astype(np.float32)
    tx = torch.from_numpy(x)
    rows = [_row(formats, torch, x, tx, name, tname, args.repeats) for name, tname in TORCH_DTYPES.items()]
    fair = _fp16_fair(formats, torch, x, tx, args.repeats)
    body = (
        f"{args.n:,} float32 values from a standard normal, median of {args.repeats} runs each, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads, lensa with {WORKERS}.\n\n"
        + table(
            [
                "format",
                "torch .to() ms",
                "cast ms",
                "cast speed vs torch",
                "quantize ms",
                "quantize speed vs torch",
                "cast vs torch",
                "target",
            ],
            rows,
        )
        + '\n\n`quantize(x, "fp16")` (float64 out) against `.to(torch.float16)`, the same treatment of memory on '
        f"both sides, median of {args.repeats} rounds taking turns (see the bench's text). The machine is shared "
        "with other engineers' jobs: read the ratios, not the times; the CPU column (the process's, every thread's, "
        "page faults included) moves less with their load than the wall time.\n\n"
        + table(
            ["threads", "memory", "torch ms", "quantize ms", "speed vs torch", "CPU ms torch / ours (ratio)", "target"],
            fair,
        )
    )
    publish("core_rounding", "Core rounding throughput", body)


if __name__ == "__main__":
    main()
