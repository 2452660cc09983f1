"""What each server change bought: the same class of learners against each step from the old server to ours.

    python -m bench.server_cost [--learners 20] [--think 1] [--seconds 30]

One run, five servers in turn, the same learners (``bench/loadgen.py``) for
each, so the rows are comparable on this shared machine:

1. ``streamlit run app.py`` with Streamlit's defaults for what we changed (a
   full garbage collection after every script run, the source file watcher);
2. our launcher, ``python -m lensa.ui.serve`` (every import done before the
   first session; start-up objects frozen out of the collector), the rest as
   in 1;
3. plus no forced collection after each run (a full one every 30 s instead);
4. plus no source file watcher: the server as it ships;
5. the bare Streamlit app (one slider, one metric), for scale.

Reported per row: the server's CPU per move (first loads included, so an
upper bound), move p50 and p95, first-load p95, and errors.
"""

from __future__ import annotations

import argparse
import asyncio

from bench.common import publish, table
from bench.loadgen import LESSON_PAGES, drive
from tests.e2e.harness import Server

OLD_DEFAULTS = {"STREAMLIT_RUNNER_POST_SCRIPT_GC": "true", "STREAMLIT_SERVER_FILE_WATCHER_TYPE": "auto"}
LADDER = (
    ("1 streamlit run app.py, Streamlit's defaults", "app.py", OLD_DEFAULTS),
    ("2 + our launcher (imports first, gc.freeze)", None, OLD_DEFAULTS),
    ("3 + no forced GC after each run", None, {"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "auto"}),
    ("4 + no source file watcher (as shipped)", None, {}),
    ("5 bare Streamlit app, for scale", "bench/bare_app.py", {}),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", type=int, default=20)
    parser.add_argument("--think", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    rows = []
    for label, app, env in LADDER:
        pages = ("app",) if app == "bench/bare_app.py" else LESSON_PAGES
        with Server(app=app, extra_env=env) as server:
            # One learner per page first, one after another (the old server can break when first runs overlap),
            # so one-off costs such as first imports are not counted.
            asyncio.run(drive(server.url, len(pages), 60.0, 0.5 * len(pages), pages=pages, ramp_s=0.5 * len(pages)))
            report = asyncio.run(
                drive(server.url, args.learners, args.think, args.seconds, pages=pages, pids=[server.proc.pid])
            )
        f = report.figures()
        rows.append(
            [
                label,
                f"{f['server CPU per move (ms)']:.1f}",
                f"{f['move p50 (ms)']:.0f}",
                f"{f['move p95 (ms)']:.0f}",
                f"{f['first load p95 (ms)']:.0f}",
                f"{f['moves']:.0f}",
                f"{f['errors']:.0f}",
            ]
        )
    body = (
        f"{args.learners} learners at {args.think:g} s think time for {args.seconds:g} s against each server in "
        "turn, one run; CPU per move counts first loads too.\n\n"
        + table(
            ["server", "CPU per move (ms)", "move p50 (ms)", "move p95 (ms)", "first load p95 (ms)", "moves", "errors"],
            rows,
        )
    )
    publish("server_cost", "What each server change bought", body)


if __name__ == "__main__":
    main()
