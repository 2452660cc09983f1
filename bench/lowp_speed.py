"""Training below 16 bits, measured: an emulated recipe's step against BF16 autocast's, and the lab's comparison of
all the recipes against its clock, natively and under older torch kernels.

    python -m bench.lowp_speed [--kernels native,avx2,default] [--repeats 2] [--steps 15]

1. **Step cost.** In one process, the same model trained with each arm's step, interleaved round by round (so a
   neighbour slows every arm alike), the median of ``--steps`` steps after warm-up per arm and round, then the
   median over rounds: FP32, BF16 autocast, and every recipe of :data:`lensa.numerics.training_recipes.TRAINING_RECIPES`
   (:func:`lensa.live.lowp.quantize_model`, products in FP32), with the lab worker's threads (all cores but one).
   Two models: the lab's MLP at the size of the
   default comparison of all the recipes (:func:`lensa.live.recipes_defaults_for`), and 256 wide too where those
   defaults are narrower (the width the lab picks on a CPU with AMX, where BF16 is native), and the reference
   transformer (:mod:`lensa.live.reference`). Target: every recipe's step at most 3x BF16 autocast's.
2. **The lab's default comparison of all the recipes** (every arm of :data:`lensa.live.ALL_ARMS`), for each kernel
   setting a fresh lab worker (:class:`lensa.live.worker.LabWorker`, as the app runs it) that calibrates itself:
   the comparison's wall time (target: at most 30 s) and its estimate's ratio (target: 0.67-1.5), per arm too.
3. **One quantization**: a 512 × 256 float32 tensor stored under each operand recipe the lab's recipes use, blocks
   along its rows and down its columns, rounded to nearest and stochastically, by the compiled kernel
   (:mod:`lensa.lowp_kernels`) and by torch's operations (``LENSA_NUMBA=0``): the median of interleaved calls, in
   nanoseconds a value, and the ratio (the same numbers either way, ``tests/test_lowp.py``).

The machine is shared while this runs: the table gives the 1-minute load average beside each measurement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any

from bench.common import publish, table, verdict

BAND = (0.67, 1.5)
WIDE = 256  # the lab's default width on the Intel Xeon with AMX (docs/performance.md, 2026-12-02)
LIMIT_S = 30.0
STEP_TARGET = 3.0


def _mlp_step(arm: str, cfg: Any) -> Any:
    import torch

    from lensa.live import lowp
    from lensa.live.task import _build_mlp
    from lensa.numerics.training_recipes import TRAINING_RECIPES

    torch.manual_seed(0)
    model = _build_mlp(cfg.features, cfg.width, cfg.depth)
    if arm in TRAINING_RECIPES:
        lowp.quantize_model(model, arm)
    x = torch.randn(cfg.batch_size, cfg.features)
    y = (x.sum(1, keepdim=True) > 0).float()
    opt = torch.optim.Adam(model.parameters(), cfg.lr)
    criterion = torch.nn.BCEWithLogitsLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm == "bf16"):
            loss = criterion(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def _reference_step(arm: str, _cfg: Any) -> Any:
    import torch
    from torch.nn import functional as F

    from lensa.live import lowp
    from lensa.live.reference import Recipe, setup
    from lensa.numerics.training_recipes import TRAINING_RECIPES

    r = Recipe()
    model, opt, data = setup(r)
    if arm in TRAINING_RECIPES:
        lowp.quantize_model(model, arm)
    x, y = next(data)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r.clip_grad_norm)
        opt.step()

    return step


def step_costs(make: Any, cfg: Any, arms: tuple[str, ...], steps: int, rounds: int) -> dict[str, float]:
    """Each arm's median step (seconds), interleaved: every round times every arm once, after two warm-up steps."""
    steppers = {arm: make(arm, cfg) for arm in arms}
    for s in steppers.values():
        s()
        s()
    per_round: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        for arm, s in steppers.items():
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                s()
                times.append(time.perf_counter() - t0)
            per_round[arm].append(statistics.median(times))
    return {arm: statistics.median(v) for arm, v in per_round.items()}


QUANT_SHAPE = (512, 256)
QUANT_RECIPES = ("fp8_tensor", "fp8_1x128", "fp8_128x128", "mxfp8_e4m3", "mxfp4_e2m1", "nvfp4", "nvfp4_16x16")


def quantization_costs(repeats: int = 30) -> list[list[str]]:
    """Rows of section 3: per operand recipe, direction and rounding, the compiled kernel's and torch's median time
    of one quantization, in nanoseconds a value, interleaved call by call."""
    import torch

    from lensa.live import lowp
    from lensa.numerics.training_recipes import OPERAND_RECIPES

    before = os.environ.get("LENSA_NUMBA")
    x = torch.randn(*QUANT_SHAPE, generator=torch.Generator().manual_seed(0))
    n = x.numel()
    rows = []
    for key in QUANT_RECIPES:
        r = OPERAND_RECIPES[key]
        for down in (False, True):
            for rounding in ("nearest", "stochastic"):
                times: dict[str, list[float]] = {"1": [], "0": []}
                g = torch.Generator().manual_seed(0)
                for i in range(repeats + 1):
                    for flag in ("1", "0"):
                        os.environ["LENSA_NUMBA"] = flag
                        t0 = time.perf_counter()
                        lowp._quantize(x, r, rounding, g, down=down)  # type: ignore[arg-type]  # a Rounding
                        if i:  # the first call of each warms up (the kernel's loading)
                            times[flag].append(time.perf_counter() - t0)
                if before is None:
                    os.environ.pop("LENSA_NUMBA", None)
                else:
                    os.environ["LENSA_NUMBA"] = before
                fast, slow = (statistics.median(times[f]) for f in ("1", "0"))
                rows.append(
                    [
                        key,
                        "down the columns" if down else "along the rows",
                        rounding,
                        f"{fast / n * 1e9:.2f}",
                        f"{slow / n * 1e9:.2f}",
                        f"{slow / fast:.1f}",
                    ]
                )
    return rows


def _comparison(setting: str) -> dict[str, Any]:
    """A fresh worker under ``setting``: its calibration, then the default comparison of all the recipes."""
    from lensa import live
    from lensa.live.worker import LabWorker

    if setting == "native":
        os.environ.pop("ATEN_CPU_CAPABILITY", None)
    else:
        os.environ["ATEN_CPU_CAPABILITY"] = setting  # the spawned worker inherits it
    worker = LabWorker()
    try:
        clock = worker.clock("cpu")
        cfg = live.recipes_defaults_for(clock)
        load = os.getloadavg()[0]
        job = worker.submit("compare", config=cfg, arms=live.ALL_ARMS)
        job.wait(lambda _j: None, poll_s=0.05)
        if job.error is not None:
            raise SystemExit(f"the comparison failed under {setting}: {job.error!r}")
        result = job.result
        estimate = cfg.estimate_seconds("cpu", live.ALL_ARMS, clock)
        arms = {a: (r.wall_s, cfg.arm_seconds(clock, a)) for a, r in result.arms.items()}
        return {
            "setting": setting,
            "capability": clock.capability,
            "calibration_s": clock.calibration_s,
            "shape": f"{cfg.width}w {cfg.batch_size}b {cfg.steps}s",
            "wall": result.wall_s,
            "estimate": estimate,
            "arms": arms,
            "load": load,
        }
    finally:
        worker.close()
        os.environ.pop("ATEN_CPU_CAPABILITY", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="native,avx2,default", help="comma-separated kernel settings")
    parser.add_argument("--repeats", type=int, default=2, help="fresh workers per kernel setting (median kept)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per arm and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every arm")
    parser.add_argument("--threads", type=int, default=0, help="torch threads for the step costs (0: the lab worker's)")
    args = parser.parse_args()

    import torch

    from lensa.live.worker import worker_threads

    torch.set_num_threads(args.threads or worker_threads())  # as the lab's worker trains

    from lensa import live
    from lensa.live.clock import machine_clock
    from lensa.numerics.training_recipes import TRAINING_RECIPES

    arms = ("fp32", "bf16", *TRAINING_RECIPES)
    clock = machine_clock("cpu")
    cfg = live.recipes_defaults_for(clock)
    load = os.getloadavg()[0]
    costs = {
        f"lab MLP ({cfg.width} wide, depth {cfg.depth}, batch {cfg.batch_size})": step_costs(
            _mlp_step, cfg, arms, args.steps, args.rounds
        ),
    }
    if cfg.width != WIDE:  # the width the lab picks where BF16 is native (an AMX Xeon's defaults), measured here too
        wide = replace(cfg, width=WIDE)
        costs[f"lab MLP ({wide.width} wide, depth {wide.depth}, batch {wide.batch_size})"] = step_costs(
            _mlp_step, wide, arms, args.steps, args.rounds
        )
    costs["reference transformer (lensa.live.reference)"] = step_costs(
        _reference_step, cfg, arms, args.steps, args.rounds
    )
    load_after = os.getloadavg()[0]
    rows = []
    checks = []
    for model, cost in costs.items():
        for arm in arms:
            ratio = cost[arm] / cost["bf16"]
            if arm in TRAINING_RECIPES:
                checks.append(ratio <= STEP_TARGET)
            rows.append([model, arm, f"{cost[arm] * 1e3:.2f}", f"{ratio:.2f}", f"{cost[arm] / cost['fp32']:.2f}"])
    step_body = (
        f"Median step per arm (ms), interleaved rounds in one process, torch with {torch.get_num_threads()} threads "
        f"(kernels {clock.capability}), load {load:.1f} before and {load_after:.1f} after. Target: every recipe's step "
        f"at most {STEP_TARGET:g}x BF16 autocast's: **{verdict(all(checks))}** ({sum(checks)} of {len(checks)}).\n\n"
        + table(["model", "arm", "step (ms)", "over BF16", "over FP32"], rows)
    )

    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(max(1, args.repeats)):
        for setting in args.kernels.split(","):
            runs[setting].append(_comparison(setting))
    rows = []
    lab_checks = []
    for setting, got in runs.items():
        wall = statistics.median(g["wall"] for g in got)
        ratio = statistics.median(g["wall"] / g["estimate"] for g in got)
        lab_checks += [wall <= LIMIT_S, BAND[0] <= ratio <= BAND[1]]
        each = " ".join(f"{g['wall'] / g['estimate']:.2f}" for g in got)
        arm_ratios = defaultdict(list)
        for g in got:
            for arm, (actual, est) in g["arms"].items():
                arm_ratios[arm].append(actual / est)
        spread = [statistics.median(v) for v in arm_ratios.values()]
        rows.append(
            [
                setting,
                got[0]["capability"],
                " / ".join(dict.fromkeys(g["shape"] for g in got)),
                f"{statistics.median(g['estimate'] for g in got):.1f}",
                f"{wall:.1f}",
                f"{ratio:.2f}",
                each,
                f"{min(spread):.2f}-{max(spread):.2f}",
                f"{statistics.median(g['load'] for g in got):.1f}",
            ]
        )
    lab_body = (
        f"The lab's default comparison of all {len(live.ALL_ARMS)} arms, a fresh lab worker (its own calibration) "
        f"per run, {max(1, args.repeats)} runs per kernel setting, medians. Targets: at most {LIMIT_S:g} s, and "
        f"actual over estimate within {BAND[0]}-{BAND[1]}: **{verdict(all(lab_checks))}** ({sum(lab_checks)} of "
        f"{len(lab_checks)}).\n\n"
        + table(
            [
                "kernels",
                "torch capability",
                "width, batch, steps",
                "estimate (s)",
                "actual (s)",
                "ratio",
                "each run",
                "per-arm ratios",
                "load",
            ],
            rows,
        )
        + "\n\n`load`: the 1-minute load average as the run started (2 cores; above 2, other work shared them)."
        " No GPU was lent: none of this has run on CUDA."
    )
    quant_body = (
        f"One quantization of a {QUANT_SHAPE[0]} × {QUANT_SHAPE[1]} float32 tensor (torch on "
        f"{torch.get_num_threads()} threads), median of interleaved calls: the compiled kernel (numba "
        f"{_numba_version()}) against torch's operations, nanoseconds a value.\n\n"
        + table(
            ["recipe", "blocks", "rounding", "compiled (ns/value)", "torch (ns/value)", "torch over compiled"],
            quantization_costs(),
        )
    )
    publish(
        "lowp_speed",
        "Training below 16 bits: step cost and the lab's comparison (bench.lowp_speed)",
        step_body + "\n\n" + lab_body + "\n\n" + quant_body,
    )


def _numba_version() -> str:
    try:
        import numba
    except ImportError:
        return "not installed: both columns are torch's"
    return str(numba.__version__)


if __name__ == "__main__":
    main()
