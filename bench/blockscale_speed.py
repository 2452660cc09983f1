"""Block scaling throughput: every lensa.numerics.blockscale recipe against the plain FP8 E4M3 cast of the same values.

    python -m bench.blockscale_speed [--n 10000000] [--repeats 7]

One run, interleaved: for each repeat the plain cast (``lensa.numerics.formats.quantize(x, "fp8_e4m3")``, float64
out, as the recipes return) and then every recipe on the same 10^7 float32 values (a 2560-wide matrix of
gradient-like values, so per-row, 1×128 and 128×128 blocks all tile it). The ratio is a recipe's median
time over the cast's median time (target: at most 2×). Then quantize to FP16 against torch's
``.to(torch.float16)`` on the same values (target: at least 0.5× torch's speed), both on one thread.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import median, publish, table, verdict

COLS = 2560


def main() -> None:
    from lensa.numerics import blockscale, formats

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rows = max(args.n // COLS, 1)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, COLS)) * 10.0 ** rng.uniform(-7, -3, (rows, 1))).astype(np.float32)
    base_times: list[float] = []
    times: dict[str, list[float]] = {k: [] for k in blockscale.RECIPES}
    formats.quantize(x, "fp8_e4m3")  # warm up
    for key in blockscale.RECIPES:
        blockscale.quantize(x, key)
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        formats.quantize(x, "fp8_e4m3")
        base_times.append(time.perf_counter() - t0)
        for key in blockscale.RECIPES:
            t0 = time.perf_counter()
            blockscale.quantize(x, key)
            times[key].append(time.perf_counter() - t0)
    base = median(base_times)
    body_rows = []
    for key, recipe in blockscale.RECIPES.items():
        t = median(times[key])
        body_rows.append([key, recipe.label, f"{t * 1e3:.0f}", f"{t / base:.2f}×", verdict(t / base <= 2.0)])

    fp16_rows = []
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tx = torch.from_numpy(x)
        tx.to(torch.float16)
        formats.quantize(x, "fp16")
        t_torch, t_ours = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tx.to(torch.float16)
            t_torch.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            formats.quantize(x, "fp16")
            t_ours.append(time.perf_counter() - t0)
        ratio = median(t_torch) / median(t_ours)
        fp16_rows.append(
            [f"{median(t_torch) * 1e3:.1f}", f"{median(t_ours) * 1e3:.1f}", f"{ratio:.2f}×", verdict(ratio >= 0.5)]
        )
    body = (
        f"{x.size:,} float32 values ({rows} × {COLS}), median of {args.repeats} interleaved runs, one thread. "
        f"The plain FP8 E4M3 cast (`lensa.numerics.formats.quantize`, float64 out) took {base * 1e3:.0f} ms.\n\n"
        + table(["recipe", "", "ms", "vs the FP8 cast", "≤ 2×"], body_rows)
    )
    if fp16_rows:
        body += "\n\nQuantize to FP16 against torch, the same values, one thread each:\n\n" + table(
            ["torch .to(float16) ms", "quantize ms", "speed vs torch", "≥ 0.5×"], fp16_rows
        )
    publish("blockscale_speed", "Block scaling throughput", body)


if __name__ == "__main__":
    main()
