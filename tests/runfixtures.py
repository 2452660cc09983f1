"""Small recorded runs made from synthetic tensors, shaped like a decoder-only transformer's, for page tests.

Two arms, as the reference run has them: an FP32 arm with every kind of tensor summarised, and an FP16 arm
with a GradScaler history (loss scale per step, skipped steps). Magnitudes are log-normal with a centre per
layer, so FP16 loses some gradients to 0 and some activations overflow; sizes are small, so building them
takes about a second.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from lensa.runstats import RunStats, summarize, summarize_update

PARAMS = (
    "tok_emb.weight",
    "blocks.0.attn.qkv.weight",
    "blocks.0.attn.proj.weight",
    "blocks.0.mlp.fc.weight",
    "blocks.1.attn.qkv.weight",
    "blocks.1.mlp.fc.weight",
    "head.weight",
)
MODULES = ("blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "blocks.1.mlp", "head")
TENSOR_STEPS = (1, 10, 20, 30)
STEPS = 30
SKIPPED = (3, 4, 17)
RECIPE = {
    "model": "decoder-only transformer, 2 layers, d_model 64 (synthetic test run)",
    "data": "synthetic tensors",
    "steps": STEPS,
    "optimizer": "Adam, lr 1e-3",
}
SIZE = 3000


def _magnitudes(rng: np.random.Generator, centre: float, spread: float = 1.2) -> np.ndarray:
    signs = rng.choice([-1.0, 1.0], SIZE)
    return (signs * 10 ** rng.normal(np.log10(centre), spread, SIZE)).astype(np.float32)


def _fp32_arm(seed: int = 0) -> RunStats:
    rng = np.random.default_rng(seed)
    run = RunStats({"arm": "fp32", "recipe": RECIPE})
    for step in TENSOR_STEPS:
        for i, name in enumerate(PARAMS):
            grad = _magnitudes(rng, 10 ** (-5.5 - 0.4 * i) * (1 + step / 30))
            run.add("weight_grad", name, step, summarize(grad))
            w = _magnitudes(rng, 0.05, 0.6)
            if name == "tok_emb.weight":
                w[:100] = 0  # padding rows: exact zeros
            run.add("weight", name, step, summarize(w))
            update = _magnitudes(rng, 10 ** (-4.0 - 0.3 * i), 0.8)
            run.add("update", name, step, summarize_update(w, w + update))
        for j, name in enumerate(MODULES):
            act = _magnitudes(rng, 3.0 * 10**j, 1.0)  # the head's logits reach past 65,504
            run.add("activation", name, step, summarize(act))
            act_grad = _magnitudes(rng, 10 ** (-7 - 0.5 * j))
            act_grad[:50] = 0
            run.add("activation_grad", name, step, summarize(act_grad))
    for step in range(1, STEPS + 1):
        run.record_step(step, 4.0 * 0.97**step)
    return run


def _fp16_arm() -> RunStats:
    run = RunStats({"arm": "fp16", "recipe": RECIPE})
    scale = 2.0**16
    clean = 0
    for step in range(1, STEPS + 1):
        skipped = step in SKIPPED
        run.record_step(step, 4.0 * 0.97**step, scale, skipped)
        if skipped:
            scale /= 2
            clean = 0
        else:
            clean += 1
            if clean == 10:
                scale *= 2
                clean = 0
    return run


@cache
def reference_arms() -> dict[str, RunStats]:
    """The synthetic reference run: its FP32 and FP16 arms."""
    return {"fp32": _fp32_arm(), "fp16": _fp16_arm()}


@cache
def upload_bytes() -> bytes:
    """One file as a learner's own FP16 training loop would record it: tensors and the scaler history together."""
    run = RunStats({"arm": "fp16", "recipe": {"model": "my model"}})
    fp32 = _fp32_arm(seed=1)
    for kind in fp32.kinds():
        for name in fp32.names(kind):
            for step in fp32.steps(kind):
                run.add(kind, name, step, fp32.get(kind, name, step))
    fp16 = _fp16_arm()
    scales = fp16.loss_scales()
    skipped = set(fp16.skipped_steps())
    for step, loss in fp16.losses().items():
        run.record_step(step, loss, scales[step], step in skipped)
    return run.to_bytes()
