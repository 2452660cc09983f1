"""Run the live lab end to end and print one plain-text report: device, comparison, matmul benchmark, scaler trace.

    python scripts/gpu_check.py                 # on a GPU machine: CUDA required, GPU-sized runs (about a minute)
    python scripts/gpu_check.py --device cpu    # CPU smoke test with the CPU defaults (seconds)
    python scripts/gpu_check.py --device cpu --small

Exit status: 0 when every check passed, 1 when a check failed, 2 when CUDA
was asked for (the default) and is absent, 3 when a run failed (LiveError).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

# Run as a plain script from anywhere: make the repository's lensa package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lensa import live
from lensa.models.lab_memory import PEAK_SLACK_BYTES, PEAK_TOLERANCE, lab_mlp_memory, peak_bounds
from lensa.models.scaling import simulate

SMALL = live.RunConfig(width=128, depth=2, batch_size=256, features=32, steps=30, warmup_steps=2, lr=1e-2)
LOSS_GAP = 0.05  # largest |final loss - FP32 final loss| accepted for the 16-bit arms


def _fmt(value: object, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec) if math.isfinite(value) else str(value)
    return str(value)


def table(headers: list[str], rows: list[list[object]]) -> str:
    """Left-aligned plain-text columns."""
    cells = [headers, *[[_fmt(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Checks:
    def __init__(self) -> None:
        self.results: list[tuple[str, bool, str]] = []

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.results.append((name, bool(ok), detail))

    def report(self) -> str:
        return "\n".join(f"[{'ok' if ok else 'FAIL'}] {name}{f' ({d})' if d else ''}" for name, ok, d in self.results)

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.results)


def progress_printer(prefix: str):
    last = {"tenth": -1}

    def show(fraction: float, message: str) -> None:
        tenth = int(fraction * 10)
        if tenth != last["tenth"]:
            last["tenth"] = tenth
            print(f"  {prefix} {fraction:4.0%}  {message}", file=sys.stderr, flush=True)

    return show


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def run(args: argparse.Namespace) -> int:
    checks = Checks()
    kind = live.resolve_device(args.device)
    info = live.device_info(kind)
    _device(kind, info)
    cfg, comp = _compare(args, kind)
    _memory(cfg, comp, checks)
    _arm_checks(cfg, comp, kind, checks)
    _matmul(args, kind, info, checks)
    _gradscaler(kind, checks)
    section("Checks")
    print(checks.report())
    return 0 if checks.passed else 1


def _device(kind: str, info: live.DeviceInfo) -> None:
    section("Device")
    print(info.summary())
    if kind == "cpu":
        print(f"cpu flags: {' '.join(info.cpu_flags) or '-'}; torch threads: {info.torch_threads}")
    for note in info.notes:
        print(f"note: {note}")


def _compare(args: argparse.Namespace, kind: str) -> tuple[live.RunConfig, live.Comparison]:
    """The FP32 / FP16 / BF16 comparison, run and printed; its configuration and result."""
    cfg = replace(SMALL if args.small else live.suggested_config(kind), device=kind)
    if args.steps:
        cfg = replace(cfg, steps=args.steps)
    cfg.validate(kind)
    section("FP32 vs FP16 vs BF16 training")
    print(
        f"MLP {cfg.features} -> {cfg.depth} x {cfg.width} -> 1, batch {cfg.batch_size}, {cfg.steps} timed steps "
        f"after {cfg.warmup_steps} warm-up steps (not timed), Adam lr {cfg.lr:g}, "
        f"{cfg.train_flop() / 1e12:.3g} TFLOP per arm, estimated at most {cfg.estimate_seconds(kind):.0f} s in all"
    )
    t0 = time.perf_counter()
    comp = live.compare(cfg, progress=progress_printer("compare"))
    rows = live.comparison_rows(comp)
    print(
        table(
            ["arm", "time s", "ms/step", "final loss", "accuracy", "peak MB", "saved MB", "skipped", "speed-up"],
            [
                [
                    r["arm"],
                    r["time_s"],
                    r["time_per_step_ms"],
                    r["final_loss"],
                    r["accuracy"],
                    r["peak_memory_mb"],
                    r["saved_for_backward_mb"],
                    r["skipped_steps"],
                    None if r["speedup_vs_fp32"] is None else f"{r['speedup_vs_fp32']:.2f}x",
                ]
                for r in rows
            ],
        )
    )
    print("peak MB: " + next(iter(comp.arms.values())).memory_note if comp.arms else "")
    print("saved MB: bytes autograd keeps for backward in one step (activations, 16-bit weight copies)")
    for name, a in comp.arms.items():
        print(f"{name}: Linear outputs {', '.join(a.layer_output_dtypes)}; loss {a.loss_dtype}")
    for name, reason in comp.not_run.items():
        print(f"not run: {name}: {reason}")
    for note in comp.notes:
        print(f"note: {note}")
    print(f"comparison wall time {time.perf_counter() - t0:.1f} s")
    return cfg, comp


def _memory(cfg: live.RunConfig, comp: live.Comparison, checks: Checks) -> None:
    """Lensa's byte-by-byte prediction (lensa.models.lab_memory.lab_mlp_memory) next to what the run measured."""
    resident = cfg.train_batches(comp.device) * cfg.batch_size + cfg.eval_size
    memory_rows = []
    for name, a in comp.arms.items():
        predicted = lab_mlp_memory(cfg.width, cfg.depth, cfg.features, cfg.batch_size, name, resident)
        measured = None if a.peak_memory_bytes is None else a.peak_memory_bytes / 1e6
        memory_rows.append(
            [
                name,
                predicted.saved_for_backward / 1e6,
                a.saved_for_backward_bytes / 1e6,
                predicted.peak / 1e6,
                measured,
                None if measured is None else f"{measured / (predicted.peak / 1e6):.3f}",
                None if measured is None else "{:.1f}..{:.1f}".format(*(b / 1e6 for b in peak_bounds(predicted.peak))),
            ]
        )
        checks.add(
            f"{name}: predicted saved-for-backward equals the measurement",
            predicted.saved_for_backward == a.saved_for_backward_bytes,
        )
        if a.peak_memory_bytes is None:  # CPU: no peak statistics, so nothing to set the prediction against
            continue
        low, high = peak_bounds(predicted.peak)
        checks.add(
            f"{name}: measured peak (max_memory_allocated) within {PEAK_TOLERANCE:.0%} of the predicted peak, "
            f"+{PEAK_SLACK_BYTES / 2**20:.0f} MiB above for cuBLAS workspaces",
            low <= a.peak_memory_bytes <= high,
            f"predicted {predicted.peak / 1e6:.1f} MB, measured {a.peak_memory_bytes / 1e6:.1f} MB, "
            f"accepted {low / 1e6:.1f}..{high / 1e6:.1f} MB",
        )
    print(
        table(
            [
                "arm",
                "saved MB predicted",
                "saved MB measured",
                "peak MB predicted",
                "peak MB measured",
                "measured/pred",
                "peak MB accepted",
            ],
            memory_rows,
        )
    )
    if any(a.peak_memory_bytes is None for a in comp.arms.values()):
        print("peak MB: not measured on CPU, so the predicted peak is not checked here (an estimate)")
    else:
        print(
            f"peak MB accepted: within {PEAK_TOLERANCE:.0%} of the prediction, and up to "
            f"{PEAK_SLACK_BYTES / 2**20:.0f} MiB more above (cuBLAS/cuBLASLt workspaces, 512 B block rounding)"
        )


def _arm_checks(cfg: live.RunConfig, comp: live.Comparison, kind: str, checks: Checks) -> None:
    """Each arm ran in its dtypes, with finite losses, near FP32's final loss; every arm ran or says why."""
    want = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    for name, a in comp.arms.items():
        checks.add(
            f"{name}: Linear layers ran in {want[name]}, loss in float32",
            set(a.layer_output_dtypes) == {want[name]} and a.loss_dtype == "float32",
        )
        checks.add(
            f"{name}: {len(a.losses)} finite losses", len(a.losses) == cfg.steps and all(map(math.isfinite, a.losses))
        )
        if kind == "cuda":
            checks.add(f"{name}: peak memory measured", (a.peak_memory_bytes or 0) > 0, _fmt(a.peak_memory_bytes))
    base = comp.arm("fp32")
    for name in ("fp16", "bf16"):
        a = comp.arm(name)
        if base and a:
            gap = abs(a.final_loss - base.final_loss)
            checks.add(f"{name}: final loss within {LOSS_GAP} of FP32", gap <= LOSS_GAP, f"gap {gap:.4f}")
    checks.add("every arm ran or has a reason", set(comp.arms) | set(comp.not_run) == set(live.ARMS))


def _matmul(args: argparse.Namespace, kind: str, info: live.DeviceInfo, checks: Checks) -> None:
    section("Matrix multiply throughput")
    if args.skip_bench:
        print("skipped (--skip-bench)")
    else:
        size = 512 if args.small else None
        bench = live.matmul_benchmark(size=size, repeats=args.repeats, device=kind)
        print(
            table(
                ["mode", "dtype", "n", "median ms", "TFLOP/s", "note"],
                [
                    [
                        r["mode"],
                        r["dtype"],
                        r["size"],
                        None if r["median_s"] is None else r["median_s"] * 1e3,
                        r["tflops"],
                        r["reason"] or ("" if r["applicable"] else "n/a"),
                    ]
                    for r in bench
                ],
            )
        )
        by_mode = {r["mode"]: r for r in bench}
        checks.add("fp32 matmul measured", (by_mode["fp32"]["tflops"] or 0) > 0)
        if kind == "cuda" and info.compute_capability and int(info.compute_capability.split(".")[0]) >= 8:
            checks.add("tf32 matmul measured", (by_mode["tf32"]["tflops"] or 0) > 0)
        if kind == "cpu":
            checks.add("tf32 marked not applicable on CPU", not by_mode["tf32"]["applicable"])


def _gradscaler(kind: str, checks: Checks) -> None:
    """A real FP16 run with a forced overflow: its GradScaler trace against lensa.models.scaling.simulate."""
    section("GradScaler trace (real FP16 run, forced overflow)")
    settings = {"init_scale": 2.0**24, "growth_interval": 3}
    trace = live.gradscaler_trace(steps=30, spike_steps=(20,), spike_factor=1e6, device=kind, **settings)
    predicted = simulate([s.found_inf for s in trace], **settings)
    overflowed = [s.step for s in trace if s.found_inf]
    print(
        f"init scale 2**24, growth every 3 clean steps, loss x 1e6 at step 20: overflow at steps {overflowed}; "
        f"scale went {trace[0].scale:g} -> min {min(s.scale_after for s in trace):g} -> "
        f"final {trace[-1].scale_after:g}"
    )
    print("step  scale        found_inf  skipped  scale after")
    for s in trace[:12]:
        print(f"{s.step:<4}  {s.scale:<11g}  {s.found_inf!s:<9}  {s.skipped!s:<7}  {s.scale_after:g}")
    print(f"... ({len(trace) - 12} more steps)")
    same = [s.scale_after for s in trace] == [p.scale_after for p in predicted] and [s.skipped for s in trace] == [
        p.skipped for p in predicted
    ]
    checks.add("real GradScaler trace equals lensa.models.scaling.simulate", same)
    checks.add(
        "overflow really happened and those steps were skipped",
        bool(overflowed) and all(s.skipped == s.found_inf for s in trace),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=live.DEVICES, default="cuda", help="default: cuda (fails without one)")
    parser.add_argument("--small", action="store_true", help="tiny runs, for a quick smoke test")
    parser.add_argument("--steps", type=int, default=0, help="override the number of timed steps")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per matmul mode")
    parser.add_argument("--skip-bench", action="store_true", help="leave out the matmul benchmark")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except live.LiveError as err:
        print(f"\n{err.kind}: {err.message}", file=sys.stderr)
        if err.kind == "no_cuda":
            print("Use --device cpu for a CPU smoke test.", file=sys.stderr)
            return 2
        return 3


if __name__ == "__main__":
    sys.exit(main())
