"""Core rounding throughput: lensa.formats against torch's own casts on the same 10^7 float32 values.

    python bench/core_rounding.py [--n 10000000] [--repeats 9]

``quantize`` returns float64 values (its contract); ``cast`` returns the
format's own storage type, as ``torch.Tensor.to(dtype)`` does. Both are timed
against torch in the same run, interleaved, and the ratio is torch's time
divided by ours (1.0 = as fast as torch; the target is 0.5 for FP16 and BF16).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    import torch

    from lensa import formats

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(args.n).astype(np.float32)
    tx = torch.from_numpy(x)
    rows = [_row(formats, torch, x, tx, name, tname, args.repeats) for name, tname in TORCH_DTYPES.items()]
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
    )
    publish("core_rounding", "Core rounding throughput", body)


if __name__ == "__main__":
    main()
