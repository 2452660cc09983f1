"""Summarising a tensor against torch's own FP16 cast plus counting its zeros, on the same 10^7 float32 values.

    python -m bench.runstats_speed [--n 10000000] [--repeats 9]

The values are drawn log-uniform over 2**-40 ... 2**10 (every FP16 zone: lost to 0, subnormal, normal,
overflow), with random signs and 5% exact zeros. ``summarize`` gives every class count of four
formats, the binade histogram and the relative error sums; torch's side is ``x.to(torch.float16)``
and ``(y == 0).sum()``, the least that answers one of those questions for one format. Both are timed
in the same run, interleaved, and the ratio is torch's median time divided by ours (1.0 = as fast as
torch; the target is >= 1.0).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import WORKERS, median, publish, table, verdict


def values(n: int, seed: int = 0) -> np.ndarray:
    """n float32 values, log-uniform over 2**-40 ... 2**10 with random signs, 5% of them exactly 0."""
    rng = np.random.default_rng(seed)
    x = np.exp2(rng.uniform(-40, 10, n)) * rng.choice(np.array([-1.0, 1.0]), n)
    x[rng.random(n) < 0.05] = 0.0
    return x.astype(np.float32)


def main() -> None:
    import torch

    from lensa import runstats

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    x = values(args.n)
    tx = torch.from_numpy(x)

    def ours() -> object:
        return runstats.summarize(x, workers=WORKERS)

    def theirs() -> object:
        return int((tx.to(torch.float16) == 0).sum())

    ours(), theirs()  # warm up: the class tables, torch's thread pool
    t_ours, t_theirs = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine
        for fn, times in ((theirs, t_theirs), (ours, t_ours)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    m_ours, m_theirs = median(t_ours), median(t_theirs)
    ratio = m_theirs / m_ours
    stats = ours()
    torch_zeros = int((tx.to(torch.float16) == 0).sum())
    ours_zeros = stats.counts("fp16")["exact_zero"] + stats.counts("fp16")["zero"]
    body = (
        f"{args.n:,} float32 values, log-uniform over 2^-40 … 2^10 with 5% zeros; median of {args.repeats} "
        f"interleaved runs each, torch {torch.__version__} with {torch.get_num_threads()} threads, lensa with "
        f"{WORKERS}. "
        "Shared machine: read the ratio, not the times.\n\n"
        + table(
            ["what", "median ms", "speed vs torch", "FP16 zeros", "target"],
            [
                ["torch `.to(float16)` + `(y == 0).sum()`", f"{m_theirs * 1e3:.1f}", "1.00×", f"{torch_zeros:,}", "—"],
                [
                    "`runstats.summarize(x, workers)` (4 formats)",
                    f"{m_ours * 1e3:.1f}",
                    f"{ratio:.2f}×",
                    f"{ours_zeros:,}" + (" (same)" if ours_zeros == torch_zeros else " (DIFFERS)"),
                    f"≥ 1.0×: {verdict(ratio >= 1.0)}",
                ],
            ],
        )
    )
    publish("runstats_speed", "Summarising a tensor for the measured-data pages", body)


if __name__ == "__main__":
    main()
