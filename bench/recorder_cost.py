"""What the Recorder costs a training loop: the reference model and a tiny GPT-2, in the background and inline.

    python -m bench.recorder_cost [--repeats 3] [--steps 120] [--threads N]

Two models: the reference run's (lensa.live.reference, FP32, its AdamW) and a GPT-2 built from a config
(transformers, 2 layers, width 64, 2 heads, vocabulary 256, context 64, batch 8, AdamW), both on the CPU with
torch's own thread count unless ``--threads`` says otherwise. Three ways each, taking turns ``--repeats`` times
from the same seed: no recorder ("bare"), the Recorder as shipped (``background=True``: the hooks copy, a summary
process summarises) and inline (``background=False``: the summaries inside the step). The default plan: about 12
log-spaced recorded steps of ``--steps``, all five kinds, every leaf module.

A step's time is its wall time (what a training loop feels: a summary process that competes for the cores shows
here), and its thread CPU time beside it (steadier on a shared machine). "Recorded" is the median over the
recorded steps (step 1 left out: it warms torch up) of each one's time over the same step's median time in the
bare runs; "unrecorded" the median step that records nothing, from step 6 on, over the bare runs' median step.
"start" is the time to make the Recorder (with the summary process), "save" the time of ``save()`` and
``close()`` at the end (waiting for the last summaries). The targets (issue 31): a recorded step at most 1.5x a
bare one and an unrecorded one at most 1.05x, with the Recorder as shipped. The machine's load average is printed
beside: on a shared machine the ratios move with the neighbours.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from bench.common import median, publish, table, verdict

RECORDED_TARGET, UNRECORDED_TARGET = 1.5, 1.05
MODES = ("bare", "background", "inline")


def _reference() -> tuple[Any, Any, Callable[[], Any], str]:
    import torch

    from lensa.live.reference import Recipe, setup, train_step

    r = Recipe()
    model, opt, data = setup(r)
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def step() -> Any:
        x, y = next(data)
        return train_step(model, opt, scaler, x, y, "fp32", r.clip_grad_norm)

    params = sum(p.numel() for p in model.parameters())
    return model, opt, step, f"the reference model ({r.n_layers} layers, width {r.d_model}, {params:,} parameters)"


def _gpt2() -> tuple[Any, Any, Callable[[], Any], str]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=2,
        vocab_size=256,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)

    def step() -> Any:
        ids = torch.randint(0, 256, (8, 64), generator=generator)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()

    params = sum(p.numel() for p in model.parameters())
    return model, opt, step, f"a GPT-2 from a config (2 layers, width 64, {params:,} parameters)"


MODELS = {"reference": _reference, "gpt2": _gpt2}


def _run(make: Callable[[], tuple[Any, Any, Callable[[], Any], str]], mode: str, steps: int) -> dict[str, Any]:
    """One run: each step's (wall, CPU) seconds, the recorded steps, and the start and save times."""
    from lensa.live.capture import Recorder

    model, opt, step, _ = make()
    t0 = time.perf_counter()
    rec = None if mode == "bare" else Recorder(model, opt, steps=steps, background=mode == "background")
    start = time.perf_counter() - t0
    wall, cpu = [], []
    for _ in range(steps):
        w0, c0 = time.perf_counter(), time.thread_time()
        loss = step()
        if rec is not None:
            rec.step(loss=loss)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
    t0 = time.perf_counter()
    if rec is not None:
        rec.save(os.devnull)
        rec.close()
    save = time.perf_counter() - t0
    recorded = list(rec.recorded_steps or []) if rec is not None else []
    return {"wall": wall, "cpu": cpu, "recorded": recorded, "start": start, "save": save}


def _ratios(runs: dict[str, list[dict[str, Any]]], mode: str, clock: str) -> tuple[float, float]:
    """(recorded, unrecorded) ratio of ``mode`` over bare, on ``clock`` ("wall" or "cpu")."""
    bare = runs["bare"]
    n = len(bare[0][clock])
    per_step_bare = [median([r[clock][i] for r in bare]) for i in range(n)]
    bare_step = median([t for r in bare for t in r[clock][5:]])
    recorded = [s for s in runs[mode][0]["recorded"] if s > 1]
    rec = median([median([r[clock][s - 1] for r in runs[mode]]) / per_step_bare[s - 1] for s in recorded])
    plain = [t for r in runs[mode] for i, t in enumerate(r[clock]) if i >= 5 and i + 1 not in recorded]
    return rec, median(plain) / bare_step


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--threads", type=int, help="torch's threads (default: torch's own)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    rows, words = [], []
    ok = True
    for key in args.models:
        make = MODELS[key]
        words.append(make()[3])
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                runs[mode].append(_run(make, mode, args.steps))
        bare_ms = median([t for r in runs["bare"] for t in r["wall"][5:]]) * 1e3
        for mode in MODES[1:]:
            rec_wall, plain_wall = _ratios(runs, mode, "wall")
            rec_cpu, plain_cpu = _ratios(runs, mode, "cpu")
            start = median([r["start"] for r in runs[mode]])
            save = median([r["save"] for r in runs[mode]])
            judged = ""
            if mode == "background":
                met = rec_wall <= RECORDED_TARGET and plain_wall <= UNRECORDED_TARGET
                ok = ok and met
                judged = verdict(met)
            rows.append(
                [
                    key,
                    mode,
                    f"{bare_ms:.1f} ms",
                    f"{rec_wall:.2f}x ({rec_cpu:.2f}x)",
                    f"{plain_wall:.3f}x ({plain_cpu:.3f}x)",
                    f"{start:.2f} s",
                    f"{save:.2f} s",
                    judged,
                ]
            )
    load_after = os.getloadavg()
    body = (
        f"{'; '.join(words)}; torch {torch.__version__} on {torch.get_num_threads()} threads, {args.steps} steps a "
        f"run, {args.repeats} runs of each taking turns, the default plan (about 12 log-spaced recorded steps, all "
        f"five kinds, every leaf module). Ratios to the bare runs' same steps, wall time (thread CPU time in "
        f"brackets). Targets: a recorded step at most {RECORDED_TARGET}x, an unrecorded one at most "
        f"{UNRECORDED_TARGET}x, as shipped (background). Load average (1, 5, 15 min) before "
        f"{', '.join(f'{v:.1f}' for v in load_before)}, after {', '.join(f'{v:.1f}' for v in load_after)}.\n\n"
        + table(
            ["model", "recorder", "bare step", "recorded step", "unrecorded step", "start", "save", "targets"], rows
        )
    )
    publish("recorder_cost", "What the Recorder costs a training step (bench.recorder_cost)", body)
    if not ok:
        print("a target was missed (see the table; on a shared machine, rerun it quiet)")


if __name__ == "__main__":
    main()
