"""Live runs: the same small model trained in FP32, FP16 and BF16 on this machine's CPU or GPU.

This is the only part of ``lensa`` that uses PyTorch, and it imports torch
lazily (inside functions), so ``import lensa.live`` stays cheap and works
where torch is missing until a run is asked for.

The task follows the article seed: synthetic binary classification (inputs
drawn from a standard normal, label = 1 when the features sum to more than
0), an MLP, ``BCEWithLogitsLoss`` and Adam. Every arm gets the same data and
the same initial weights. The training step is the PyTorch AMP recipe::

    with ctx:                              # nullcontext() or torch.autocast(device, dtype)
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()          # GradScaler(device, enabled=dtype is float16)
    scaler.unscale_(optimizer)             # only when clipping: clip the true gradients
    clip_grad_norm_(params, max_norm)
    scaler.step(optimizer)                 # skipped when a gradient is inf or NaN
    scaler.update()

Public API
----------
- :class:`RunConfig` (``validate``, ``clamped``, ``estimate_seconds``), :data:`LIMITS`,
  :data:`MAX_RUN_SECONDS`, :func:`suggested_config`, :func:`defaults_for`
- :func:`calibrate` / :func:`machine_clock` -> :class:`CostModel`: this machine's clock, measured here
- :func:`compare` -> :class:`Comparison` of :class:`ArmResult`; :func:`speedup`,
  :func:`comparison_rows`, :func:`rows_to_csv`; the arms below 16 bits (:data:`LOWP_ARMS`, one per recipe of
  :data:`lensa.numerics.training_recipes.TRAINING_RECIPES`, emulated by :mod:`lensa.live.lowp`),
  :func:`recipes_defaults_for`, :func:`recipe_rows`, :func:`final_loss`, :func:`gap_percent`, :func:`diverged`
- :func:`matmul_benchmark` -> list of :class:`MatmulRow`
- :func:`gradscaler_trace` -> list of :class:`TraceStep`
- :func:`device_info` -> :class:`DeviceInfo`; :func:`resolve_device`
- :func:`is_busy`, :func:`run_slot`, :class:`LiveError`

The app never calls these in its server process: :mod:`lensa.live.worker` runs
them in a separate, lower-priority process, so torch stays out of the server.

Modules (one per concern; this package re-exports their public names):
:mod:`~lensa.live.errors` (:class:`LiveError`), :mod:`~lensa.live.config` (the settings and their time
estimate), :mod:`~lensa.live.clock` (the calibration that times this machine for the estimate),
 :mod:`~lensa.live.device`, :mod:`~lensa.live.slot` (one run at a time),
:mod:`~lensa.live.torch_utils`, :mod:`~lensa.live.task` (the MLP and its data), :mod:`~lensa.live.arms`
(the comparison), :mod:`~lensa.live.rows`, :mod:`~lensa.live.matmul`, :mod:`~lensa.live.trace`,
:mod:`~lensa.live.schedule` (which steps a Recorder summarises); and,
importing torch at once and so never imported from here, :mod:`~lensa.live.capture` (the Recorder) and
:mod:`~lensa.live.reference` (the reference run), and :mod:`~lensa.live.integrations` (the Hugging Face Trainer
and Lightning callbacks, which import their libraries too). A module-level setting such as
``MATMUL_PRODUCT_BUDGET_S`` is read where it is defined (:mod:`lensa.live.matmul`): change it there.

The first run in a process pays about 2 s of one-off set-up (torch and
oneDNN initialisation) on top of its own time.

Units: seconds (``*_s``), bytes (``*_bytes``), FLOP and FLOP/s; TFLOP/s in
benchmark rows. One run at a time per process: :func:`compare`,
:func:`matmul_benchmark` and :func:`gradscaler_trace` each hold the run slot
and fail with ``LiveError(kind="busy")`` when another thread holds it.
"""

from __future__ import annotations

from lensa.live.arms import (
    ArmResult,
    Comparison,
    compare,
)
from lensa.live.clock import (
    CostModel,
    calibrate,
    machine_clock,
)
from lensa.live.config import (
    ALL_ARMS,
    ARM_LABELS,
    ARMS,
    DEFAULT_CANDIDATES,
    DEFAULT_RUN_SECONDS,
    GPU_CONFIG,
    LIMITS,
    LOWP_ARMS,
    MAX_RUN_SECONDS,
    RECIPES_RUN_SECONDS,
    TRAIN_SET_BYTES,
    Progress,
    RunConfig,
    ShouldStop,
    defaults_for,
    recipes_defaults_for,
    suggested_config,
)
from lensa.live.device import (
    CPU_FLAGS_OF_INTEREST,
    DEVICES,
    DeviceInfo,
    device_info,
    resolve_device,
)
from lensa.live.errors import (
    ErrorKind,
    LiveError,
)
from lensa.live.matmul import (
    MATMUL_DEFAULT_SIZE,
    MATMUL_MODES,
    MATMUL_PRODUCT_BUDGET_S,
    MATMUL_REPEATS_LIMITS,
    MATMUL_SIZE_LIMITS,
    MatmulRow,
    matmul_benchmark,
)
from lensa.live.rows import (
    CLEARLY_FASTER,
    CLOSE_TO_BF16,
    CLOSE_TO_BF16_PCT,
    ComparisonRow,
    RecipeRow,
    RecipesVerdict,
    arm_scale_history,
    clearly_faster,
    comparison_rows,
    diverged,
    final_loss,
    gap_percent,
    loss_gap,
    recipe_rows,
    recipes_verdict,
    rows_to_csv,
    speedup,
)
from lensa.live.slot import (
    is_busy,
    run_slot,
)
from lensa.live.trace import (
    TRACE_LIMITS,
    TraceStep,
    gradscaler_trace,
)

__all__ = [
    "ALL_ARMS",
    "ARMS",
    "ARM_LABELS",
    "CLEARLY_FASTER",
    "CLOSE_TO_BF16",
    "CLOSE_TO_BF16_PCT",
    "CPU_FLAGS_OF_INTEREST",
    "DEFAULT_CANDIDATES",
    "DEFAULT_RUN_SECONDS",
    "DEVICES",
    "GPU_CONFIG",
    "LIMITS",
    "LOWP_ARMS",
    "MATMUL_DEFAULT_SIZE",
    "MATMUL_MODES",
    "MATMUL_PRODUCT_BUDGET_S",
    "MATMUL_REPEATS_LIMITS",
    "MATMUL_SIZE_LIMITS",
    "MAX_RUN_SECONDS",
    "RECIPES_RUN_SECONDS",
    "TRACE_LIMITS",
    "TRAIN_SET_BYTES",
    "ArmResult",
    "Comparison",
    "ComparisonRow",
    "CostModel",
    "DeviceInfo",
    "ErrorKind",
    "LiveError",
    "MatmulRow",
    "Progress",
    "RecipeRow",
    "RecipesVerdict",
    "RunConfig",
    "ShouldStop",
    "TraceStep",
    "arm_scale_history",
    "calibrate",
    "clearly_faster",
    "compare",
    "comparison_rows",
    "defaults_for",
    "device_info",
    "diverged",
    "final_loss",
    "gap_percent",
    "gradscaler_trace",
    "is_busy",
    "loss_gap",
    "machine_clock",
    "matmul_benchmark",
    "recipe_rows",
    "recipes_defaults_for",
    "recipes_verdict",
    "resolve_device",
    "rows_to_csv",
    "run_slot",
    "speedup",
    "suggested_config",
]
