"""What every block recipe costs a record: ``summarize(x, recipes=True)`` against today's ``summarize(x)``.

    python -m bench.recipes_speed [--n 10000000] [--repeats 5]

The same 10^7 float32 values as ``bench.runstats_speed`` (log-uniform over 2**-40 ... 2**10, 5% zeros),
shaped as a 10^4 × 10^3 matrix, so that every recipe's blocks (rows, 1×128 tiles, 128×128 blocks, MX's 32
and NVFP4's 16) are real. Both timed in the same run, interleaved; the ratio is the recipe record's median
time over ``summarize``'s (target: at most 3×). ``summarize`` counts on ``WORKERS`` threads as in
``bench.runstats_speed``; the recipes (:func:`lensa.blockscale.lost_all`) run on one.
"""

from __future__ import annotations

import argparse
import time

from bench.common import WORKERS, median, publish, table, verdict
from bench.runstats_speed import values


def main() -> None:
    from lensa import blockscale, runstats

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cols = 1000
    x = values(args.n - args.n % cols).reshape(-1, cols)

    def today() -> object:
        return runstats.summarize(x, workers=WORKERS)

    def with_recipes() -> object:
        return runstats.summarize(x, workers=WORKERS, recipes=True)

    today(), with_recipes()  # warm up
    t_today, t_recipes = [], []
    for _ in range(args.repeats):
        for fn, times in ((today, t_today), (with_recipes, t_recipes)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    m_today, m_recipes = median(t_today), median(t_recipes)
    ratio = m_recipes / m_today
    body = (
        f"{x.size:,} float32 values as a {x.shape[0]:,} × {x.shape[1]:,} matrix; {len(blockscale.RECIPES)} "
        f"recipes; median of {args.repeats} interleaved runs, summarize on {WORKERS} threads. "
        "Shared machine: read the ratio, not the times.\n\n"
        + table(
            ["what", "median ms", "× summarize", "target"],
            [
                ["`runstats.summarize(x, workers)`", f"{m_today * 1e3:.0f}", "1.00×", "—"],
                [
                    "`runstats.summarize(x, workers, recipes=True)`",
                    f"{m_recipes * 1e3:.0f}",
                    f"{ratio:.1f}×",
                    f"≤ 3×: {verdict(ratio <= 3.0)}",
                ],
            ],
        )
    )
    publish("recipes_speed", "Every block recipe in a record", body)


if __name__ == "__main__":
    main()
