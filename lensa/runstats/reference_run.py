"""The shipped reference run, read for the measured-data pages without torch.

``lensa/data/reference_fp32.npz`` and ``reference_fp16.npz`` are :mod:`lensa.runstats` files written by
``make reference-run`` (:mod:`lensa.live.reference`): the same small transformer trained in FP32 with the
recorder on, and with FP16 autocast and a real GradScaler. Each file's ``meta`` holds the arm, the recipe
and the training text's size and SHA-256.

This module imports numpy (through :mod:`lensa.runstats`) only.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from lensa.runstats import RunStats, load

DATA_DIR = Path(__file__).resolve().parent.parent / "data"  # lensa/data
REFERENCE_ARMS: tuple[str, ...] = ("fp32", "fp16")
RECIPE_FIELDS: tuple[str, ...] = (
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "d_mlp",
    "context",
    "batch_size",
    "steps",
    "recorded_steps",
    "optimizer",
    "lr",
    "warmup_steps",
    "betas",
    "weight_decay",
    "clip_grad_norm",
    "init_scale",
    "growth_interval",
    "seed",
    "threads",
    "text",
    "torch_version",
)


def reference_path(arm: str) -> Path:
    """The shipped file of ``arm`` ("fp32" or "fp16"); ValueError for another arm."""
    if arm not in REFERENCE_ARMS:
        raise ValueError(f"the reference run has arms {REFERENCE_ARMS}, not {arm!r}")
    return DATA_DIR / f"reference_{arm}.npz"


@cache
def load_reference() -> tuple[RunStats, RunStats]:
    """(FP32 arm, FP16 arm) of the shipped reference run, read once per process. Treat them as read-only."""
    return load(reference_path("fp32")), load(reference_path("fp16"))


def parameters(recipe: dict[str, Any]) -> int:
    """The reference transformer's parameter count from its recipe's sizes, without torch: the token and position
    embeddings, per block two LayerNorms, the attention's qkv and projection and the MLP's two layers (with
    biases), and the final LayerNorm; the head is tied to the token embedding, so it adds none
    (:class:`lensa.live.reference.TinyGPT`)."""
    vocab, d, layers, mlp, context = (int(recipe[k]) for k in ("vocab_size", "d_model", "n_layers", "d_mlp", "context"))
    norm = 2 * d  # a LayerNorm's weight and bias
    attention = (d * 3 * d + 3 * d) + (d * d + d)
    feed_forward = (d * mlp + mlp) + (mlp * d + d)
    return vocab * d + context * d + layers * (2 * norm + attention + feed_forward) + norm


def reference_recipe() -> dict[str, Any]:
    """The reference run's recipe (JSON values: sizes in tokens, learning rate, seed, torch version ...)."""
    recipe: dict[str, Any] = load_reference()[0].meta["recipe"]
    return recipe
