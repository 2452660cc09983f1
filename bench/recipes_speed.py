"""What every block recipe costs a record: ``summarize(x, recipes=True)`` against today's ``summarize(x)``.

    python -m bench.recipes_speed [--n 10000000] [--repeats 5]

The same 10^7 float32 values as ``bench.runstats_speed`` (log-uniform over 2**-40 ... 2**10, 5% zeros),
shaped as a 10^4 × 10^3 matrix, so that every recipe's blocks (rows, 1×128 tiles, 128×128 blocks, MX's 32
and NVFP4's 16) are real. Timed in the same run, interleaved; the ratio is the recipe record's median time
over ``summarize``'s (target: at most 3×). ``summarize`` counts on ``WORKERS`` threads as in
``bench.runstats_speed``, and hands the same threads on to the recipes (:func:`lensa.numerics.blockscale.lost_all`).
Where numba is installed the recipes take the compiled pass (:mod:`lensa.numerics.blockscale_dispatch`), and a third row
times the numpy pass on the same values (``LENSA_NUMBA=0``), for where it is not.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.common import WORKERS, median, publish, table, verdict
from bench.runstats_speed import values


def main() -> None:
    from lensa import runstats
    from lensa.numerics import blockscale, blockscale_dispatch

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

    def numpy_alone() -> object:  # the numpy pass, where numba is not installed
        os.environ["LENSA_NUMBA"] = "0"
        try:
            return runstats.summarize(x, workers=WORKERS, recipes=True)
        finally:
            os.environ.pop("LENSA_NUMBA")

    compiled = blockscale_dispatch.available()
    assert with_recipes() == runstats.summarize(x, recipes=True)  # threads change no number
    arms = {"today": today, "with_recipes": with_recipes, **({"numpy_alone": numpy_alone} if compiled else {})}
    times: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, list[float]] = {k: [] for k in arms}  # the process's CPU time, every thread's
    for fn in arms.values():  # warm up
        fn()
    for _ in range(args.repeats):
        for key, fn in arms.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[key].append(time.perf_counter() - t0)
            cpu[key].append(time.process_time() - c0)
    m = {k: median(v) for k, v in times.items()}
    c = {k: median(v) for k, v in cpu.items()}
    ratio = m["with_recipes"] / m["today"]
    how = "compiled (numba)" if compiled else "numpy (numba is not installed here)"
    rows = [
        ["`runstats.summarize(x, workers)`", f"{m['today'] * 1e3:.0f}", "1.00×", f"{c['today'] * 1e3:.0f}", "—"],
        [
            f"`runstats.summarize(x, workers, recipes=True)`, {how}",
            f"{m['with_recipes'] * 1e3:.0f}",
            f"{ratio:.1f}×",
            f"{c['with_recipes'] * 1e3:.0f}",
            f"≤ 3×: {verdict(ratio <= 3.0)}",
        ],
    ]
    if compiled:
        rows.append(
            [
                "the same with numpy alone (`LENSA_NUMBA=0`)",
                f"{m['numpy_alone'] * 1e3:.0f}",
                f"{m['numpy_alone'] / m['today']:.1f}×",
                f"{c['numpy_alone'] * 1e3:.0f}",
                "—",
            ]
        )
    body = (
        f"{x.size:,} float32 values as a {x.shape[0]:,} × {x.shape[1]:,} matrix; {len(blockscale.RECIPES)} "
        f"recipes; median of {args.repeats} interleaved runs, {WORKERS} threads, the recipes on the same threads. "
        "Shared machine (other engineers' jobs on the same 2 cores): read the ratios, not the times; the CPU "
        "column (the process's, all threads) moves less with the neighbours' load than the wall time does.\n\n"
        + table(["what", "median ms", "× summarize", "CPU ms", "target"], rows)
    )
    publish("recipes_speed", "Every block recipe in a record", body)


if __name__ == "__main__":
    main()
