"""The lab's estimate against the run's own time, per arm, on this machine and under older torch kernels.

    python -m bench.lab_clock [--kernels native,avx2,default] [--repeats 3]

For each kernel setting (``native``: torch's own choice for this CPU; ``avx2`` and ``default``: what
``ATEN_CPU_CAPABILITY`` holds torch to, as on a CPU without AVX-512, or without AVX2), a fresh lab worker
starts (:class:`lensa.live.worker.LabWorker`, exactly as the app's), times this machine
(:mod:`lensa.live.clock`) and runs two comparisons, recorded as the lab page records them:

- the defaults the calibration chose (:func:`lensa.live.defaults_for`), which must end within 15 s;
- the largest run the page allows: of all the page's slider stops (depth 3), the one whose estimate is the
  longest still within the time limit (:data:`lensa.live.MAX_RUN_SECONDS`).

Per arm, the estimate (:meth:`lensa.live.RunConfig.arm_seconds`) against the arm's wall time in the worker
(``ArmResult.wall_s``: set-up, warm-up, steps, recording, evaluation), and for the whole run the estimate
against the comparison's wall time. The target: every ratio (actual / estimate) within 0.67-1.5. The worker
runs at the lowest priority on a machine other work shares, so a ratio far above 1 can be a neighbour: each
kernel setting is repeated (``--repeats``, a fresh worker and calibration each time, interleaved with the
other settings) and the table shows the median ratio per arm, with the load average while it ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

from bench.common import publish, table, verdict

BAND = (0.67, 1.5)
DEFAULT_LIMIT_S = 15.0


def _stops(name):
    """The lab page's slider stops for ``name`` (lensa.ui.site, as the page draws them)."""
    from lensa.ui.site import PAGES_BY_KEY

    return tuple(int(v) for v in PAGES_BY_KEY["lab"].control(name).stops)


def largest_allowed(clock):
    """The page's largest run: the slider stops (depth 3) with the longest estimate within the limit."""
    from lensa import live

    best = None
    for width in _stops("width"):
        for batch in _stops("batch"):
            for steps in _stops("steps"):
                cfg = live.RunConfig(width=width, batch_size=batch, steps=steps, device="cpu", record=True)
                est = cfg.estimate_seconds("cpu", clock=clock)
                if est <= live.MAX_RUN_SECONDS["cpu"] and (best is None or est > best[0]):
                    best = (est, cfg)
    assert best is not None, "not even the smallest run fits the limit"
    return best[1]


def _run(worker, cfg):
    job = worker.submit("compare", config=cfg)
    job.wait(lambda _j: None, poll_s=0.05)
    if job.error is not None:
        raise SystemExit(f"the run failed: {job.error!r}")
    return job.result


def _one(setting, ratios, shapes, notes, walls):
    """One fresh worker under ``setting``: its calibration, then the defaults and the largest run allowed."""
    from lensa import live
    from lensa.live.worker import LabWorker

    if setting == "native":
        os.environ.pop("ATEN_CPU_CAPABILITY", None)
    else:
        os.environ["ATEN_CPU_CAPABILITY"] = setting  # the spawned worker inherits it
    worker = LabWorker()
    try:
        t0 = time.monotonic()
        clock = worker.clock("cpu")
        started = time.monotonic() - t0
        slow = ", ".join(f"{a} {clock.slowdown[a]:.2g}x" for a in ("fp16", "bf16"))
        widths = "; ".join(
            f"{a} " + ", ".join(f"{w}: {r / 1e9:.3g}" for w, r in clock.rate_by_width[a]) for a in live.ARMS
        )
        notes[setting].append(
            f"torch kernels {clock.capability}, {clock.threads} thread(s); calibration {clock.calibration_s:.2f} s "
            f"(worker ready in {started:.1f} s, torch import included); matrix products against FP32's: {slow}; "
            f"emulated: {', '.join(a for a in ('fp16', 'bf16') if clock.emulated(a)) or 'none'}; matmul GFLOP/s "
            f"by width: {widths}."
        )
        for label, cfg in (("defaults", live.defaults_for(clock)), ("largest", largest_allowed(clock))):
            load = os.getloadavg()[0]
            result = _run(worker, cfg)
            shape = f"{cfg.width}w {cfg.batch_size}b {cfg.steps}s"
            shapes[(setting, label)].append(shape)
            for arm, res in result.arms.items():
                est = cfg.arm_seconds(clock, arm)
                ratios[(setting, label, arm)].append((res.wall_s / est, est, res.wall_s, load))
            est = cfg.estimate_seconds("cpu", clock=clock)
            ratios[(setting, label, "all")].append((result.wall_s / est, est, result.wall_s, load))
            if label == "defaults":
                walls[setting].append(result.wall_s)
    finally:
        worker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="native,avx2,default", help="comma-separated kernel settings")
    parser.add_argument("--repeats", type=int, default=3, help="fresh workers per kernel setting (median kept)")
    args = parser.parse_args()

    settings = args.kernels.split(",")
    ratios: dict[tuple[str, str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
    shapes: dict[tuple[str, str], list[str]] = defaultdict(list)
    notes: dict[str, list[str]] = defaultdict(list)
    walls: dict[str, list[float]] = defaultdict(list)
    for _ in range(max(1, args.repeats)):
        for setting in settings:
            _one(setting, ratios, shapes, notes, walls)
    os.environ.pop("ATEN_CPU_CAPABILITY", None)

    rows = []
    checks = []
    for (setting, label, arm), got in ratios.items():
        med = statistics.median(r for r, _e, _a, _l in got)
        checks.append(BAND[0] <= med <= BAND[1])
        each = " ".join(f"{r:.2f}" for r, _e, _a, _l in got)
        rows.append(
            [
                setting,
                label,
                " / ".join(dict.fromkeys(shapes[(setting, label)])),
                arm,
                f"{statistics.median(e for _r, e, _a, _l in got):.2f}",
                f"{statistics.median(a for _r, _e, a, _l in got):.2f}",
                f"{med:.2f}",
                each,
                f"{statistics.median(ld for _r, _e, _a, ld in got):.1f}",
            ]
        )
    lines = []
    for setting in settings:
        wall = statistics.median(walls[setting])
        checks.append(wall <= DEFAULT_LIMIT_S)
        lines.append(
            f"- `{setting}`: defaults (recorded) took {wall:.1f} s (median), "
            f"{verdict(wall <= DEFAULT_LIMIT_S)} (at most {DEFAULT_LIMIT_S:.0f} s). First worker: {notes[setting][0]}"
        )
    body = (
        "Actual over estimate per arm, and for the whole comparison (`all`), with the lab worker as the app runs "
        f"it; {max(1, args.repeats)} fresh workers (each its own calibration) per kernel setting, the median "
        f"ratio kept. Target: every median ratio within {BAND[0]}-{BAND[1]}: **{verdict(all(checks))}** "
        f"({sum(checks)} of {len(checks)} checks, the defaults' 15 s included).\n\n"
        + table(
            [
                "kernels",
                "run",
                "width, batch, steps",
                "arm",
                "estimate (s)",
                "actual (s)",
                "ratio (median)",
                "each run",
                "load",
            ],
            rows,
        )
        + "\n\n`load`: the 1-minute load average as the run started (2 cores; above 2, other work shared them).\n\n"
        + "\n".join(lines)
    )
    publish("lab_clock", "The lab's estimate against its runs (bench.lab_clock)", body)


if __name__ == "__main__":
    main()
