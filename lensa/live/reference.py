"""The reference run: a small decoder-only transformer trained on the CPU, in FP32 and in FP16 with a GradScaler.

    python -m lensa.live.reference [--out lensa/data] [--steps N]     # or: make reference-run

The model is what people train in mixed precision today, made small: byte tokens, a token embedding plus
learned positions, ``n_layers`` pre-norm blocks (LayerNorm -> causal self-attention -> residual, LayerNorm ->
MLP with GELU -> residual), a final LayerNorm and a head tied to the token embedding. The text is the
project's own: every string of ``lensa/text/en.toml`` then ``lensa/text/id.toml``, in file order, joined by
newlines and read as UTF-8 bytes, Markdown and ``{placeholders}`` included (a byte vocabulary of 256 keeps
the model's shapes independent of the text). That text is kept, frozen, in ``lensa/data/reference_corpus.txt``:
the catalogues change with every edit of the site's wording, and the run must not, so ``make reference-run``
rebuilds the shipped files bit for bit with the same torch and the same kernel set; on a CPU whose vector kernels
differ it gives the same records with values that differ in the last bits, more with each step (README, "Your own
run"). ``--refresh-corpus`` takes the catalogues as they are now instead, and then every figure of the run changes.
Batches are windows of ``context + 1`` bytes at random offsets drawn from the seed.

Two arms from the same initial weights and the same batches:

- ``fp32``: plain FP32 training with the :class:`lensa.live.capture.Recorder` on (what FP16, BF16 and FP8
  *would* do to its real values);
- ``fp16``: ``torch.autocast("cpu", dtype=torch.float16)`` with a real ``torch.amp.GradScaler("cpu")``
  (initial scale 2**16, growth every ``growth_interval`` clean steps), the Recorder on too: its real loss
  scale history, skipped steps, and the values as FP16 autocast produced them.

Each arm is written as a :mod:`lensa.runstats` file with the :class:`Recipe` (and the arm) in its ``meta``.
Deterministic on one machine given the seed (one fixed thread count, deterministic algorithms): the same torch
and kernel set (``ATEN_CPU_CAPABILITY``, numpy's dispatch) give the same files bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lensa.live.capture import Recorder, log_spaced_steps
from lensa.runstats import RunStats

TEXT_DIR = Path(__file__).resolve().parents[1] / "text"
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
ARMS: tuple[str, ...] = ("fp32", "fp16")


@dataclass(frozen=True)
class Recipe:
    """Everything that defines the reference run. Sizes in tokens (bytes); learning rate per step."""

    vocab_size: int = 256  # bytes
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_mlp: int = 256
    context: int = 64
    batch_size: int = 16
    steps: int = 300
    recorded_steps: int = 12  # about this many, log-spaced, the last included
    optimizer: str = "AdamW"
    lr: float = 3e-3
    warmup_steps: int = 30  # linear from lr / warmup_steps, then cosine down to lr / 10 at the last step
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    clip_grad_norm: float = 1.0
    init_scale: float = 2.0**16
    growth_interval: int = 50  # GradScaler's default is 2000; shorter, so 300 steps show it grow and back off
    seed: int = 0
    threads: int = 2
    text: tuple[str, ...] = ("lensa/text/en.toml", "lensa/text/id.toml")
    torch_version: str = field(default_factory=lambda: torch.__version__)

    def to_meta(self) -> dict[str, Any]:
        """The recipe as JSON values (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


# --- data ---------------------------------------------------------------------------------------------------


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


CORPUS_PATH = DATA_DIR / "reference_corpus.txt"


def corpus(recipe: Recipe) -> bytes:
    """The training text, as the shipped run used it: the frozen copy of :func:`corpus_from_catalogues`."""
    return CORPUS_PATH.read_bytes()


def corpus_from_catalogues(recipe: Recipe) -> bytes:
    """Every string of the recipe's catalogues as they are now, in file order, joined by newlines, UTF-8."""
    root = TEXT_DIR.parent.parent
    parts: list[str] = []
    for rel in recipe.text:
        with open(root / rel, "rb") as fh:
            parts.extend(_strings(tomllib.load(fh)))
    return "\n".join(parts).encode("utf-8")


def batches(data: torch.Tensor, recipe: Recipe) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, next-byte targets) of shape (batch_size, context), at offsets drawn from the seed; endless."""
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    span = data.numel() - recipe.context - 1
    while True:
        start = torch.randint(0, span, (recipe.batch_size, 1), generator=gen)
        idx = start + torch.arange(recipe.context + 1)
        window = data[idx]
        yield window[:, :-1], window[:, 1:]


# --- the model ----------------------------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.n_heads = r.n_heads
        self.qkv = nn.Linear(r.d_model, 3 * r.d_model)
        self.proj = nn.Linear(r.d_model, r.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, t, d))
        return out


class MLP(nn.Module):
    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.fc = nn.Linear(r.d_model, r.d_mlp)
        self.act = nn.GELU()
        self.proj = nn.Linear(r.d_mlp, r.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(self.act(self.fc(x)))
        return out


class Block(nn.Module):
    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(r.d_model)
        self.attn = CausalSelfAttention(r)
        self.ln2 = nn.LayerNorm(r.d_model)
        self.mlp = MLP(r)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class TinyGPT(nn.Module):
    """Byte-level decoder-only transformer; ``forward(tokens)`` gives logits (batch, context, vocab_size)."""

    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.tok = nn.Embedding(r.vocab_size, r.d_model)
        self.pos = nn.Embedding(r.context, r.d_model)
        self.blocks = nn.ModuleList(Block(r) for _ in range(r.n_layers))
        self.ln_f = nn.LayerNorm(r.d_model)
        self.head = nn.Linear(r.d_model, r.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * r.n_layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


def lr_at(step: int, r: Recipe) -> float:
    """Learning rate of ``step`` (1-based): linear warm-up, then cosine down to a tenth at the last step."""
    if step <= r.warmup_steps:
        return r.lr * step / r.warmup_steps
    progress = (step - r.warmup_steps) / max(1, r.steps - r.warmup_steps)
    return r.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


# --- the run ------------------------------------------------------------------------------------------------


def setup(r: Recipe) -> tuple[TinyGPT, torch.optim.Optimizer, Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """The seeded model, its AdamW (no weight decay on biases, LayerNorms and positions) and the batches."""
    torch.manual_seed(r.seed)
    model = TinyGPT(r)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("pos")]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith("pos"))]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": r.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=r.lr,
        betas=r.betas,
        foreach=True,
    )
    data = torch.frombuffer(bytearray(corpus(r)), dtype=torch.uint8).long()
    return model, opt, batches(data, r)


def train_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    x: torch.Tensor,
    y: torch.Tensor,
    arm: str,
    clip: float,
) -> torch.Tensor:
    """One step of PyTorch's AMP recipe (FP32 when ``arm`` is "fp32", where the scaler is disabled)."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16, enabled=arm == "fp16"):
        logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(opt)
    scaler.update()
    return loss.detach()


def run_arm(r: Recipe, arm: str, *, record: bool = True) -> RunStats:
    """Train one arm of the recipe; its statistics, with the recipe, the arm and the text's fingerprint in ``meta``.

    Uses ``r.threads`` threads and deterministic algorithms while it runs (both restored after).
    """
    if arm not in ARMS:
        raise ValueError(f"arms are {ARMS}, not {arm!r}")
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(r.threads)
    torch.use_deterministic_algorithms(True)
    try:
        model, opt, data = setup(r)
        scaler = torch.amp.GradScaler(
            "cpu", init_scale=r.init_scale, growth_interval=r.growth_interval, enabled=arm == "fp16"
        )
        text = corpus(r)
        meta = {
            "arm": arm,
            "recipe": r.to_meta(),
            "text_bytes": len(text),
            "text_sha256": hashlib.sha256(text).hexdigest(),
        }
        schedule = log_spaced_steps(r.steps, r.recorded_steps) if record else ()
        with Recorder(
            model, opt, steps=schedule, scaler=scaler if arm == "fp16" else None, meta=meta, amax=True, recipes=True
        ) as rec:
            for step in range(1, r.steps + 1):
                for group in opt.param_groups:
                    group["lr"] = lr_at(step, r)
                x, y = next(data)
                rec.step(loss=train_step(model, opt, scaler, x, y, arm, r.clip_grad_norm))
        return rec.stats()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def output_path(arm: str, out_dir: str | os.PathLike[str] = DATA_DIR) -> Path:
    return Path(out_dir) / f"reference_{arm}.npz"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rebuild the shipped reference run (both arms).")
    parser.add_argument("--out", default=str(DATA_DIR), help="folder for reference_fp32.npz and reference_fp16.npz")
    parser.add_argument("--steps", type=int, default=Recipe.steps)
    parser.add_argument(
        "--refresh-corpus",
        action="store_true",
        help=f"first rewrite {CORPUS_PATH.name} from the catalogues as they are now (the run then changes)",
    )
    args = parser.parse_args(argv)
    r = replace(Recipe(), steps=args.steps)
    if args.refresh_corpus:
        CORPUS_PATH.write_bytes(corpus_from_catalogues(r))
    os.makedirs(args.out, exist_ok=True)
    for arm in ARMS:
        t0 = time.perf_counter()
        run = run_arm(r, arm)
        path = output_path(arm, args.out)
        run.save(path)
        losses = run.losses()
        print(
            f"{arm}: {time.perf_counter() - t0:.0f} s, loss {losses[1]:.3f} -> {losses[r.steps]:.3f}, "
            f"{len(run)} tensors, skipped {run.skipped_steps()}, {path.stat().st_size:,} bytes -> {path}"
        )


if __name__ == "__main__":
    main()
