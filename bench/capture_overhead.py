"""What the capture Recorder adds to training the reference model (lensa.live.reference, FP32).

    python -m bench.capture_overhead [--repeats 5] [--recipes] [--amax]

``--recipes`` and ``--amax`` give every recorder of the bench ``recipes=True`` (every block recipe's record at
the recorded steps, file version 2) and ``amax=True`` (each tensor's amax at every step, recorded or not).

Part 1, the target: whole runs of the reference recipe (its 300 steps, about a dozen of them recorded, all
five kinds: weights, weight gradients, updates, every leaf module's output and its gradient), timed step by
step: without a recorder, with the recorder as shipped (the summaries made by a process of their own from
copies in shared memory, ``background=True``), and with every summary computed inside the step
(``background=False``). The runs take turns, ``--repeats`` times each, each from the same seed. A step's
time is the training thread's CPU time plus any time it spent waiting for room in the recorder's ring (so a
summary process that falls behind shows); on this shared machine wall time swings with the neighbours'
load while this stays put. The target is the issue's: at most 1.3x "the step time without it, at the steps
that record". So each recorded step is set against the same step of the runs without a recorder: the median
of its times over the repeats over the median of theirs, and every recorded step must be within 1.3x. A
single step of a single run also moves with the machine (a bare run's slowest step is itself 1.2x or more
its median here), so that figure, each recorded step over its own run's bare median step, is shown beside
it for the noise, not judged. The run's wall time includes waiting, at the end, for the last summaries; its
CPU counts the summary process too.

Part 2, where the summarising work goes: CPU time of single steps that record one kind only (synchronous),
steps interleaved, over a bare step's.

torch trains on one thread (``torch.set_num_threads(1)``), so the summary process has the second core of
this 2-core machine: the setting of a GPU run, whose CPU cores are free while the GPU trains, or of a CPU
run that leaves a core to the recorder.
"""

from __future__ import annotations

import argparse
import resource
import time

from bench.common import median, publish, table, verdict

TARGET_RATIO = 1.3


def _run(r, steps: int, mode: str, options: dict[str, bool]) -> tuple[list[float], float, int]:
    """One run: (wall seconds of each step, wall seconds of the whole run incl. the final stats(), CPU of it)."""
    import torch

    from lensa.live.capture import Recorder, log_spaced_steps
    from lensa.live.reference import lr_at, setup, train_step

    model, opt, data = setup(r)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    rec = None
    if mode != "bare":
        rec = Recorder(
            model, opt, steps=log_spaced_steps(steps, r.recorded_steps), background=mode == "background", **options
        )
    times = []
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0, t_run = time.process_time() + children.ru_utime + children.ru_stime, time.perf_counter()
    for i in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(i, r)
        x, y = next(data)
        t0, waited = time.thread_time(), rec.waited_seconds if rec is not None else 0.0
        loss = train_step(model, opt, scaler, x, y, "fp32", r.clip_grad_norm)
        if rec is not None:
            rec.step(loss=loss)
            waited = rec.waited_seconds - waited
        times.append(time.thread_time() - t0 + waited)
    if rec is not None:
        rec.stats()  # every summary in
        rec.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the summary process, ended by close()
    return times, time.perf_counter() - t_run, time.process_time() + children.ru_utime + children.ru_stime - cpu0


def main() -> None:
    import torch

    from lensa.live.capture import log_spaced_steps
    from lensa.live.reference import Recipe, setup

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kind-steps", type=int, default=7)
    parser.add_argument("--recipes", action="store_true", help="recorders keep every block recipe's record")
    parser.add_argument("--amax", action="store_true", help="recorders keep each tensor's amax at every step")
    parser.add_argument("--no-kinds", action="store_true", help="skip part 2 (the cost of each kind)")
    args = parser.parse_args()
    options = {"recipes": args.recipes, "amax": args.amax}
    r = Recipe()
    torch.set_num_threads(1)
    recorded = log_spaced_steps(r.steps, r.recorded_steps)

    rows1, bare_step = _whole_runs(r, recorded, args.repeats, options)

    # --- part 2: the synchronous cost of each kind, CPU time -----------------------------------------------
    params = sum(p.numel() for p in setup(r)[0].parameters())
    if args.no_kinds:
        part2, what = "", ""
    else:
        part2, what = _kinds(r, args.kind_steps, options)
    flags = [f"`{k}=True`" for k, on in options.items() if on]
    body = (
        f"The reference model ({r.n_layers} layers, d_model {r.d_model}, context {r.context}, batch {r.batch_size}, "
        f"{params:,} parameters), FP32, torch {torch.__version__} training on one thread.{what} "
        + (f"Every recorder here runs with {' and '.join(flags)}. " if flags else "")
        + "\n\n"
        + _whole_runs_text(r, recorded, args.repeats, bare_step, rows1)
        + part2
    )
    name, title = "capture_overhead", "Capture overhead of the Recorder"
    if flags:
        name += "".join(f"_{k}" for k, on in options.items() if on)
        title += f" ({', '.join(flags).replace('`', '')})"
    publish(name, title, body)


def _whole_runs(r, recorded: list[int], repeats: int, options: dict[str, bool]) -> tuple[list[tuple], list[float]]:
    """Part 1: whole runs without a recorder, with it in the background and with it inside the step, taking
    turns ``repeats`` times; the table's rows and each repeat's bare median step."""
    modes = ("bare", "background", "synchronous")
    steps_of: dict[str, list[list[float]]] = {m: [] for m in modes}  # per repeat, every step's time
    single: dict[str, list[float]] = {m: [] for m in modes}  # each recorded step of each run over its bare median
    whole: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    plain: dict[str, list[float]] = {m: [] for m in modes}  # per run: its median step that does not record
    bare_step: list[float] = []
    kept = [s for s in recorded if s > 1]  # step 1 also warms torch up
    for _ in range(repeats):
        runs = {m: _run(r, r.steps, m, options) for m in modes}
        base = median(runs["bare"][0])
        bare_step.append(base)
        for m, (times, total, cpu_s) in runs.items():
            steps_of[m].append(times)
            single[m] += [times[s - 1] / base for s in kept]
            plain[m].append(median([t for i, t in enumerate(times, 1) if i not in recorded]) / base)
            whole[m].append(total)
            cpu[m].append(cpu_s)
    # Each recorded step against the same step without a recorder: the median of its repeats over theirs.
    paired = {
        m: [median([t[s - 1] for t in steps_of[m]]) / median([t[s - 1] for t in steps_of["bare"]]) for s in kept]
        for m in modes
    }
    base_total = median(whole["bare"])
    labels = {
        "bare": "no recorder",
        "background": "recorder, summaries in a process of their own (default)",
        "synchronous": "recorder, summaries inside the step (background=False)",
    }
    rows1 = []
    for m in modes:
        ok = max(paired[m]) <= TARGET_RATIO
        target = "—" if m == "bare" else f"≤ {TARGET_RATIO}×" + (f": {verdict(ok)}" if m == "background" else "")
        rows1.append(
            (
                labels[m],
                f"{median(paired[m]):.2f}×",
                f"{max(paired[m]):.2f}×",
                f"{max(single[m]):.2f}×",
                f"{median(plain[m]):.2f}×",
                f"{median(whole[m]):.2f} s ({median(whole[m]) / base_total:.2f}×)",
                f"{median(cpu[m]):.2f} s",
                target,
            )
        )
    return rows1, bare_step


def _whole_runs_text(r, recorded: list[int], repeats: int, bare_step: list[float], rows1: list[tuple]) -> str:
    """Part 1's text and table."""
    return (
        f"**Whole runs** of the recipe ({r.steps} steps; recorded: {', '.join(map(str, recorded))}), "
        f"{repeats} of each, taking turns. A step's time is the training thread's CPU time plus any wait for "
        "room in the recorder's ring (wall time swings with this shared machine's load, which other engineers' "
        "jobs share; this does not). "
        "A recorded step's ratio is the median of its time over the repeats divided by the median of the same "
        "step's time in the runs without a recorder, for every recorded step but the first (which also warms "
        "torch up); the target is that every one of them is at most "
        f"{TARGET_RATIO}×. For the noise a single step sees, the next column divides each recorded step of each "
        "run by the median step of the bare run beside it and shows the largest (the bare run's own row shows "
        f"how far a step without a recorder strays; median bare step {median(bare_step) * 1e3:.1f} ms). "
        "A step that does not record costs the hooks' calls (and, with `amax=True`, each tensor's amax): the "
        "median of a run's other steps over the bare run's median step, median over the repeats. "
        "The run's wall time includes waiting for the last summaries; its CPU counts the summary process too.\n\n"
        + table(
            [
                "",
                "recorded step vs the same step bare, median",
                "slowest",
                "one run's slowest step vs its bare median",
                "a step that does not record vs the bare median",
                "whole run",
                "CPU of the run",
                "target",
            ],
            rows1,
        )
    )


def _kinds(r, kind_steps: int, options: dict[str, bool]) -> tuple[str, str]:
    """Part 2: CPU time of single steps recording one kind, inside the step; the table and what a step records."""
    import torch

    from lensa.live.capture import Recorder
    from lensa.live.reference import lr_at, setup, train_step
    from lensa.runstats import KINDS

    every = range(1, 2 + kind_steps + 1)
    plans = [("bare", None, KINDS), ("all five kinds", every, KINDS)]
    plans += [(f"{kind} only", every, (kind,)) for kind in KINDS]
    arms = {}
    for label, steps, kinds in plans:
        model, opt, data = setup(r)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        rec = None if steps is None else Recorder(model, opt, steps=steps, kinds=kinds, background=False, **options)
        arms[label] = (model, opt, data, scaler, rec, [])
    for i in every:
        for model, opt, data, scaler, rec, times in arms.values():
            for group in opt.param_groups:
                group["lr"] = lr_at(i, r)
            x, y = next(data)
            t0 = time.process_time()
            loss = train_step(model, opt, scaler, x, y, "fp32", r.clip_grad_norm)
            if rec is not None:
                rec.step(loss=loss)
            if i > 2:
                times.append(time.process_time() - t0)
    kind_bare = median(arms["bare"][-1])
    rows2 = [(label, f"{median(t) * 1e3:.1f}", f"{median(t) / kind_bare:.2f}×") for label, (*_, t) in arms.items()]
    rec_run = arms["all five kinds"][4].stats()
    for *_, rec, _ in arms.values():
        if rec is not None:
            rec.close()
    first = rec_run.steps("weight")[0]
    at_first = [rec_run.get(k, n, first) for k in rec_run.kinds() for n in rec_run.names(k)]
    values = sum(t.size for t in at_first)
    what = f" A recorded step summarises {len(at_first)} tensors holding {values:,} values."
    table2 = (
        "\n\n**Where the summarising work goes**: CPU time of single steps recording one kind, inside the step "
        f"(background=False), median of {kind_steps} interleaved steps after 2 of warm-up.\n\n"
        + table(["recording", "CPU ms per step", "vs bare"], rows2)
    )
    return table2, what


if __name__ == "__main__":
    main()
