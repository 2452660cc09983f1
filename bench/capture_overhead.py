"""What the capture Recorder adds to a training step of the reference model (lensa.live.reference, FP32).

    python -m bench.capture_overhead [--repeats 9]

Copies of the reference model, seeded alike, take turns: one without a recorder, one with a recorder that
records every step (all five kinds: weights, weight gradients, updates, every leaf module's output and its
gradient), one whose hooks are in place but that records no step, and one per kind recording only that.
A step is the whole training step (forward, backward, clipping, AdamW) with the recorder's own ``step()``.

Timed in CPU seconds of the process with torch on one thread. On the shared 2-core machine a step's wall
time swings ten-fold with the neighbours' load while its CPU time stays put, and with one thread the CPU
time is the work the step does (torch's idle threads would otherwise count their spinning). The recorder's
summaries (torch integer work, then numpy per non-empty bin) run on that same thread. The ratios are
medians over the bare step's median; the last row is a whole run of the recipe (its steps, about 12 of
them recorded). The target is at most 1.3x at recorded steps.
"""

from __future__ import annotations

import argparse
import time

from bench.common import median, publish, table, verdict

TARGET_RATIO = 1.3


def main() -> None:
    import torch

    from lensa.live.capture import Recorder, log_spaced_steps
    from lensa.live.reference import Recipe, lr_at, setup, train_step
    from lensa.runstats import KINDS

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    r = Recipe()
    torch.set_num_threads(1)

    every = range(1, args.warmup + args.repeats + 1)
    plans: list[tuple[str, range | tuple[()] | None, tuple[str, ...]]] = [
        ("bare", None, KINDS),
        ("recorded step", every, KINDS),
        ("step not recorded", (), KINDS),
        *((f"recorded step, {kind} only", every, (kind,)) for kind in KINDS),
    ]
    arms = {}
    for label, steps, kinds in plans:
        model, opt, data = setup(r)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        rec = None if steps is None else Recorder(model, opt, steps=steps, kinds=kinds)
        arms[label] = (model, opt, data, scaler, rec, [])

    for i in range(1, args.warmup + args.repeats + 1):
        for model, opt, data, scaler, rec, times in arms.values():
            for group in opt.param_groups:
                group["lr"] = lr_at(i, r)
            x, y = next(data)
            t0 = time.process_time()
            loss = train_step(model, opt, scaler, x, y, "fp32", r.clip_grad_norm)
            if rec is not None:
                rec.step(loss=loss)
            if i > args.warmup:
                times.append(time.process_time() - t0)
    for *_, rec, _ in arms.values():
        if rec is not None:
            rec.close()

    bare = median(arms["bare"][-1])
    rows = []
    medians = {label: median(times) for label, (*_, times) in arms.items()}
    for label, m in medians.items():
        target = f"≤ {TARGET_RATIO}×" if label in ("recorded step", "step not recorded") else "—"
        if label == "recorded step":
            target += f": {verdict(m / bare <= TARGET_RATIO)}"
        rows.append((label, f"{m * 1e3:.1f}", f"{m / bare:.2f}×", target))
    n_rec = len(log_spaced_steps(r.steps, r.recorded_steps))
    whole = n_rec * medians["recorded step"] + (r.steps - n_rec) * medians["step not recorded"]
    rows.append(
        (f"whole run: {r.steps} steps, {n_rec} recorded", f"{whole:.2f} s", f"{whole / (r.steps * bare):.2f}×", "—")
    )
    rec_run = arms["recorded step"][4].stats()
    first = rec_run.steps("weight")[0]
    at_first = [rec_run.get(k, n, first) for k in rec_run.kinds() for n in rec_run.names(k)]
    values = sum(t.size for t in at_first)
    extra_ns = (medians["recorded step"] - bare) / values * 1e9
    params = sum(p.numel() for p in arms["bare"][0].parameters())
    body = (
        f"The reference model ({r.n_layers} layers, d_model {r.d_model}, context {r.context}, batch {r.batch_size}, "
        f"{params:,} parameters), FP32, torch {torch.__version__} on one thread; CPU time, median of "
        f"{args.repeats} steps each after {args.warmup} of warm-up, all interleaved. A recorded step "
        f"summarises {len(at_first)} tensors holding {values:,} values: {extra_ns:.0f} ns of CPU per value, "
        "against a training step that does little work per value in so small a model.\n\n"
        + table(["training step", "CPU ms", "vs bare", "target"], rows)
    )
    publish("capture_overhead", "Capture overhead of the Recorder", body)


if __name__ == "__main__":
    main()
