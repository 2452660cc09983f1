"""What the capture Recorder adds to a training step of the reference model (lensa.live.reference, FP32).

    python -m bench.capture_overhead [--repeats 5]

Three copies of the reference model, seeded alike, take turns (so all three see the same machine): one
without a recorder, one with a recorder that records every step (all five kinds: weights, weight
gradients, updates, every leaf module's output and its gradient) and one with a recorder whose hooks are
in place but that records no step. The time is one whole training step (forward, backward, clipping,
AdamW) with the recorder's own ``step()``; the ratio is each median over the bare step's median. The
target is at most 1.3x at recorded steps.
"""

from __future__ import annotations

import argparse
import time

from bench.common import median, publish, table, verdict

TARGET_RATIO = 1.3


def main() -> None:
    import torch

    from lensa.live.capture import Recorder
    from lensa.live.reference import Recipe, lr_at, setup, train_step

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    r = Recipe()
    torch.set_num_threads(r.threads)

    arms = {}
    for label, record in (("bare", None), ("recorded step", True), ("step not recorded", False)):
        model, opt, data = setup(r)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        rec = None
        if record is not None:
            steps = range(1, args.warmup + args.repeats + 1) if record else ()
            rec = Recorder(model, opt, steps=steps)
        arms[label] = (model, opt, data, scaler, rec, [])

    for i in range(1, args.warmup + args.repeats + 1):
        for model, opt, data, scaler, rec, times in arms.values():
            for group in opt.param_groups:
                group["lr"] = lr_at(i, r)
            x, y = next(data)
            t0 = time.perf_counter()
            loss = train_step(model, opt, scaler, x, y, "fp32", r.clip_grad_norm)
            if rec is not None:
                rec.step(loss=loss)
            if i > args.warmup:
                times.append(time.perf_counter() - t0)
    for *_, rec, _ in arms.values():
        if rec is not None:
            rec.close()

    bare = median(arms["bare"][-1])
    rows = []
    ratios = {}
    for label, (*_, times) in arms.items():
        m = median(times)
        ratios[label] = m / bare
        target = "—" if label == "bare" else f"≤ {TARGET_RATIO}×"
        if label == "recorded step":
            target += f": {verdict(ratios[label] <= TARGET_RATIO)}"
        rows.append((label, f"{m * 1e3:.0f}", f"{ratios[label]:.2f}×", target))
    rec_run = arms["recorded step"][4].stats()
    per_step = len(rec_run) // max(1, len(rec_run.steps("weight")))
    params = sum(p.numel() for p in arms["bare"][0].parameters())
    body = (
        f"The reference model ({r.n_layers} layers, d_model {r.d_model}, context {r.context}, batch {r.batch_size}, "
        f"{params:,} parameters), FP32, torch {torch.__version__} with {r.threads} threads; median of "
        f"{args.repeats} steps each after {args.warmup} of warm-up, the three interleaved. A recorded step "
        f"summarises {per_step} tensors. Shared machine: read the ratios, not the times.\n\n"
        + table(["training step", "median ms", "vs bare", "target"], rows)
    )
    publish("capture_overhead", "Capture overhead of the Recorder", body)


if __name__ == "__main__":
    main()
