"""The article's task: the MLP, the synthetic data (label = 1 when the features sum to more than 0), and the
seeded initial weights every arm starts from. Torch is imported inside each function."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from lensa.live.config import RunConfig


def _build_mlp(features: int, width: int, depth: int) -> torch.nn.Sequential:
    from torch import nn

    layers: list[nn.Module] = [nn.Linear(features, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def _make_data(n: int, features: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    x = torch.randn(n, features, generator=generator)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    return x, y


def _initial_state(cfg: RunConfig) -> dict[str, torch.Tensor]:
    """The seeded initial weights every arm starts from, on the CPU."""
    import torch

    # fork_rng keeps the caller's global RNG state untouched by our seeding.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = _build_mlp(cfg.features, cfg.width, cfg.depth)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
