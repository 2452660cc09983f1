"""The recipes below 16 bits on the reference transformer: the comparison the lesson's "Training below 16 bits" shows.

    python -m lensa.live.lowp_reference [--out lensa/data] [--steps N] [--arms fp32,bf16,nvfp4,...]
    # or: make reference-recipes

The reference run's model, text, batches and schedule (:mod:`lensa.live.reference`: a two-block byte-level
transformer, AdamW, warm-up then cosine, clipping), trained once per arm from the same initial weights on the same
batches: ``fp32``; ``bf16`` (``torch.autocast("cpu", dtype=torch.bfloat16)``); and each recipe of
:data:`lensa.numerics.training_recipes.TRAINING_RECIPES`, every ``nn.Linear`` (the tied head included) made a quantized
layer by :func:`lensa.live.lowp.quantize_model` (seeded from the recipe's seed), everything else in FP32. Each arm's
loss at every step is kept, and at :data:`COUNTED_STEPS` log-spaced steps what each layer's input, weight and gradient
flushed and saturated. Deterministic on one machine (one thread, :data:`THREADS`, and deterministic algorithms): the
same torch and kernel set give the same file bit for bit.

The file (:data:`OUTPUT`, a few tens of kilobytes) is plain numpy: ``losses`` (arms × steps, float32), ``arms``,
per arm and layer the summed counts, and ``meta``: the recipe of the run, the seed, the command that makes it, the
torch version, the seconds each arm took. :mod:`lensa.lessons.low_bits` reads it, without torch.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from lensa.live import lowp
from lensa.live.reference import DATA_DIR, Recipe, lr_at, setup
from lensa.live.schedule import log_spaced_steps
from lensa.numerics.training_recipes import ROLES, TRAINING_RECIPES

OUTPUT = DATA_DIR / "reference_recipes.npz"
ARMS: tuple[str, ...] = ("fp32", "bf16", *TRAINING_RECIPES)
COUNTED_STEPS = 12
COMMAND = "python -m lensa.live.lowp_reference"
THREADS = 1
"""One thread: the run's numbers depend on the thread count, and one thread is also the quickest way through the
many small operations an emulated recipe makes on a machine other work shares (threads wait on each other at
every one of them)."""


def run_arm(r: Recipe, arm: str) -> tuple[np.ndarray, dict[str, dict[str, list[int]]], float]:
    """Train ``arm`` on the reference recipe: (loss per step, counts per layer and tensor, seconds).

    Counts are (values, not 0, flushed, saturated) summed over the counted steps, per layer name and tensor.
    """
    if arm not in ARMS:
        raise ValueError(f"arms are {', '.join(ARMS)}, not {arm!r}")
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(r.threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    try:
        model, opt, data = setup(r)
        quantized = arm in TRAINING_RECIPES
        if quantized:
            lowp.quantize_model(model, arm, seed=r.seed)
        counted = set(log_spaced_steps(r.steps, COUNTED_STEPS))
        losses = np.empty(r.steps, np.float32)
        for step in range(1, r.steps + 1):
            for group in opt.param_groups:
                group["lr"] = lr_at(step, r)
            x, y = next(data)
            if quantized:
                lowp.set_counting(model, step in counted)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm == "bf16"):
                logits = model(x)
                loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), r.clip_grad_norm)
            opt.step()
            losses[step - 1] = float(loss.detach())
        counts: dict[str, dict[str, list[int]]] = {}
        if quantized:
            for m in lowp.lowp_layers(model):
                for role in ROLES:
                    c = m.lowp.counts.get(role)
                    if c is not None and c.values:
                        counts.setdefault(m.lowp.name, {})[role] = [c.values, c.nonzero, c.flushed, c.saturated]
        return losses, counts, time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def save(path: str | os.PathLike[str], r: Recipe, results: dict[str, tuple[np.ndarray, Any, float]]) -> None:
    arms = list(results)
    layers = sorted({name for _l, counts, _s in results.values() for name in counts})
    counts = np.zeros((len(arms), len(layers), len(ROLES), 4), np.int64)
    for i, arm in enumerate(arms):
        for j, name in enumerate(layers):
            for k, role in enumerate(ROLES):
                counts[i, j, k] = results[arm][1].get(name, {}).get(role, [0, 0, 0, 0])
    meta = {
        "recipe": r.to_meta(),
        "seed": r.seed,
        "command": COMMAND + ("" if r.steps == Recipe.steps else f" --steps {r.steps}"),
        "counted_steps": list(log_spaced_steps(r.steps, COUNTED_STEPS)),
        "seconds": {arm: round(results[arm][2], 1) for arm in arms},
        "torch_version": torch.__version__,
        "kernels": str(torch.backends.cpu.get_cpu_capability()),
    }
    np.savez_compressed(
        path,
        arms=np.array(arms),
        layers=np.array(layers),
        roles=np.array(ROLES),
        losses=np.stack([results[a][0] for a in arms]),
        counts=counts,
        meta=np.array(json.dumps(meta, sort_keys=True)),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the reference transformer with every recipe below 16 bits.")
    parser.add_argument("--out", default=str(OUTPUT.parent), help=f"folder for {OUTPUT.name}")
    parser.add_argument("--steps", type=int, default=Recipe.steps)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms (default: all)")
    args = parser.parse_args(argv)
    r = replace(Recipe(), steps=args.steps, threads=THREADS)
    results = {}
    for arm in args.arms.split(","):
        results[arm] = run_arm(r, arm)
        losses, _counts, seconds = results[arm]
        print(f"{arm}: {seconds:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / OUTPUT.name
    save(path, r, results)
    print(f"{path.stat().st_size:,} bytes -> {path}")


if __name__ == "__main__":
    main()
