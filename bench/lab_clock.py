"""The lab's estimate against the run's own time, per arm, on this machine and under older torch kernels.

    python -m bench.lab_clock [--kernels native,avx2,default]

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
runs at the lowest priority on a machine other work shares, so a ratio far above 1 can be a neighbour.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.common import publish, table, verdict

BAND = (0.67, 1.5)
DEFAULT_LIMIT_S = 15.0
WIDTHS = (64, 128, 256, 512, 1024, 2048, 4096)
BATCHES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
STEPS = (10, 20, 30, 60, 100, 200, 300)


def largest_allowed(clock):
    """The page's largest run: the slider stops (depth 3) with the longest estimate within the limit."""
    from lensa import live

    best = None
    for width in WIDTHS:
        for batch in BATCHES:
            for steps in STEPS:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="native,avx2,default", help="comma-separated kernel settings")
    args = parser.parse_args()

    from lensa import live
    from lensa.live.worker import LabWorker

    rows = []
    checks = []
    notes = []
    for setting in args.kernels.split(","):
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
            notes.append(
                f"- `{setting}`: torch kernels {clock.capability}, {clock.threads} thread(s); calibration "
                f"{clock.calibration_s:.2f} s (worker ready in {started:.1f} s, torch import included); matrix "
                f"products against FP32's: {slow}; emulated: "
                f"{', '.join(a for a in ('fp16', 'bf16') if clock.emulated(a)) or 'none'}."
            )
            for label, cfg in (("defaults", live.defaults_for(clock)), ("largest", largest_allowed(clock))):
                result = _run(worker, cfg)
                shape = f"{cfg.width}w {cfg.batch_size}b {cfg.steps}s"
                for arm, res in result.arms.items():
                    est = cfg.arm_seconds(clock, arm)
                    ratio = res.wall_s / est
                    checks.append(BAND[0] <= ratio <= BAND[1])
                    rows.append([setting, label, shape, arm, f"{est:.2f}", f"{res.wall_s:.2f}", f"{ratio:.2f}"])
                est = cfg.estimate_seconds("cpu", clock=clock)
                ratio = result.wall_s / est
                checks.append(BAND[0] <= ratio <= BAND[1])
                rows.append([setting, label, shape, "all", f"{est:.2f}", f"{result.wall_s:.2f}", f"{ratio:.2f}"])
                if label == "defaults":
                    checks.append(result.wall_s <= DEFAULT_LIMIT_S)
                    notes.append(
                        f"- `{setting}` defaults ({shape}, recorded): {result.wall_s:.1f} s, "
                        f"{verdict(result.wall_s <= DEFAULT_LIMIT_S)} (at most {DEFAULT_LIMIT_S:.0f} s)."
                    )
        finally:
            worker.close()
    os.environ.pop("ATEN_CPU_CAPABILITY", None)
    body = (
        "Actual over estimate per arm, and for the whole comparison (`all`), with the lab worker as the app runs "
        f"it. Target: every ratio within {BAND[0]}-{BAND[1]}: **{verdict(all(checks))}** "
        f"({sum(checks)} of {len(checks)} checks).\n\n"
        + table(["kernels", "run", "width, batch, steps", "arm", "estimate (s)", "actual (s)", "ratio"], rows)
        + "\n\n"
        + "\n".join(notes)
    )
    publish("lab_clock", "The lab's estimate against its runs (bench.lab_clock)", body)


if __name__ == "__main__":
    main()
