"""Training memory: model states per parameter, activations, and how other tools count.

Model states follow the ZeRO paper (Rajbhandari et al. 2019, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", Fig. 1): with mixed
precision and Adam every parameter costs 2 + 2 + K bytes, a 16-bit weight and
gradient plus K = 12 bytes of optimizer state (FP32 master weight, Adam m and
v). On N GPUs stage 1 (P_os) splits the K bytes, stage 2 (P_os+g) also the
gradient, stage 3 (P_os+g+p) also the weight: (2 + 2 + K)Psi, 4Psi + K Psi/N,
2Psi + (2 + K)Psi/N and (2 + 2 + K)Psi/N bytes per GPU.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", eq. 1 and Table 2): a transformer layer keeps
``s*b*h*(34 + 5*a*s/h)`` bytes at 16 bits (s tokens per sequence, b sequences,
h = d_model, a heads), i.e. ``34 h`` bytes per token plus ``5 a s`` for the
attention scores. FlashAttention never stores the scores and selective
recomputation recomputes them, so both keep ``34 h``; full recomputation
keeps only each layer's 16-bit input, ``2 h`` per token. Activations belong to
the tokens a GPU processes: ZeRO does not divide them. FP32 training stores
them at twice the size; strictly the 1-byte dropout masks inside the 34 (2 h
and a s of it) do not double, so FP32 is over-counted by about 3 %, a
simplification the lesson's figures keep. The 34 is GPT-style (4h GeLU MLP,
dropout): a Llama-style layer differs in detail, not in size class.

How DeepSpeed and Hugging Face accelerate count the same model states is in
:mod:`lensa.models.estimators`; the live lab's MLP, byte by byte, in
:mod:`lensa.models.lab_memory`.

All sizes are in bytes; the view converts to decimal gigabytes (1 GB = 1e9 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Precision = Literal["mixed", "fp32"]
Optimizer = Literal["adam", "sgd_momentum", "adam_8bit"]
Checkpointing = Literal["none", "selective", "full"]
Group = Literal["params", "grads", "optimizer"]
StateKey = Literal["weights", "gradients", "master", "momentum", "adam_m", "adam_v"]

PRECISIONS: tuple[Precision, ...] = ("mixed", "fp32")
OPTIMIZERS: tuple[Optimizer, ...] = ("adam", "sgd_momentum", "adam_8bit")
CHECKPOINTING: tuple[Checkpointing, ...] = ("none", "selective", "full")

# Korthikanti et al. 2022, eq. (1): bytes per token per layer at 16 bits.
ACTIVATION_BYTES_PER_TOKEN_PER_D_MODEL = 34
ATTENTION_SCORE_BYTES_PER_TOKEN_PER_HEAD_PER_POSITION = 5
# Korthikanti et al. 2022, Table 2: with full recomputation only each layer's 16-bit input is kept.
CHECKPOINT_BYTES_PER_TOKEN_PER_D_MODEL = 2


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a transformer that memory depends on."""

    params: float  # parameter count
    d_model: int  # hidden size
    layers: int
    heads: int
    context: int  # longest sequence the model was trained on, in tokens

    def __post_init__(self) -> None:
        if not (self.params > 0 and self.d_model > 0 and self.layers > 0 and self.heads > 0 and self.context > 0):
            raise ValueError("a model needs positive params, d_model, layers, heads and context")


# The lesson's model: a 7B chat model (Llama 2 7B's shape).
SEVEN_B = ModelShape(params=6.74e9, d_model=4096, layers=32, heads=32, context=4096)


@dataclass(frozen=True)
class StateComponent:
    """One slice of the model states: what it is, its bytes per parameter, its ZeRO group."""

    key: StateKey
    dtype: str  # "fp16", "fp32", "int8"
    bytes_per_param: float
    group: Group


_OPTIMIZER_STATES: dict[Optimizer, tuple[tuple[StateKey, str, float], ...]] = {
    "adam": (("adam_m", "fp32", 4), ("adam_v", "fp32", 4)),
    "sgd_momentum": (("momentum", "fp32", 4),),
    # bitsandbytes' 8-bit Adam: both moments block-quantised to one byte.
    "adam_8bit": (("adam_m", "int8", 1), ("adam_v", "int8", 1)),
}


def state_components(precision: Precision = "mixed", optimizer: Optimizer = "adam") -> tuple[StateComponent, ...]:
    """The model states of one parameter, in the order the lesson draws them.

    Mixed precision: 16-bit weight and gradient, FP32 master weight, then the
    optimizer's own states. FP32: 4-byte weight and gradient and the
    optimizer's states, with no separate master copy.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    if optimizer not in _OPTIMIZER_STATES:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}")
    if precision == "mixed":
        parts = [
            StateComponent("weights", "fp16", 2, "params"),
            StateComponent("gradients", "fp16", 2, "grads"),
            StateComponent("master", "fp32", 4, "optimizer"),
        ]
    else:
        parts = [
            StateComponent("weights", "fp32", 4, "params"),
            StateComponent("gradients", "fp32", 4, "grads"),
        ]
    parts += [StateComponent(k, d, b, "optimizer") for k, d, b in _OPTIMIZER_STATES[optimizer]]
    return tuple(parts)


def bytes_per_param(precision: Precision = "mixed", optimizer: Optimizer = "adam") -> float:
    """Bytes of model state per parameter: 16 for Adam in either precision."""
    return float(sum(c.bytes_per_param for c in state_components(precision, optimizer)))


def zero_divisor(group: Group, zero_stage: int, gpus: int) -> int:
    """How many GPUs share one group of states under ZeRO stage 0..3.

    Stage 1 partitions optimizer states, stage 2 also gradients, stage 3 also
    the parameters (ZeRO paper, Figure 1).
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError("ZeRO stage must be 0, 1, 2 or 3")
    if gpus < 1:
        raise ValueError("need at least one GPU")
    first_stage = {"optimizer": 1, "grads": 2, "params": 3}[group]
    return gpus if zero_stage >= first_stage else 1


def state_bytes_by_component(
    params: float,
    precision: Precision = "mixed",
    optimizer: Optimizer = "adam",
    zero_stage: int = 0,
    gpus: int = 1,
) -> tuple[tuple[StateComponent, float], ...]:
    """Each model-state component with the bytes one GPU holds of it."""
    return tuple(
        (c, params * c.bytes_per_param / zero_divisor(c.group, zero_stage, gpus))
        for c in state_components(precision, optimizer)
    )


def model_state_bytes(
    params: float,
    precision: Precision = "mixed",
    optimizer: Optimizer = "adam",
    zero_stage: int = 0,
    gpus: int = 1,
) -> float:
    """Bytes of model states held by one GPU."""
    return float(sum(b for _, b in state_bytes_by_component(params, precision, optimizer, zero_stage, gpus)))


def activation_bytes_per_token_per_layer(
    model: ModelShape,
    precision: Precision = "mixed",
    checkpointing: Checkpointing = "none",
    flash_attention: bool = True,
    seq_len: int | None = None,
) -> float:
    """Bytes one token leaves behind in one layer for the backward pass.

    ``seq_len`` (tokens per sequence) matters only for the attention-score
    term, stored when FlashAttention is off and nothing is recomputed; it
    defaults to the model's context. Selective recomputation (Korthikanti et
    al.) recomputes exactly that term, so it costs what FlashAttention does.
    Full recomputation keeps only each layer's input. FP32 doubles it all.
    """
    if checkpointing not in CHECKPOINTING:
        raise ValueError(f"checkpointing must be one of {CHECKPOINTING}")
    width = 2 if precision == "fp32" else 1
    if checkpointing == "full":
        return float(CHECKPOINT_BYTES_PER_TOKEN_PER_D_MODEL * model.d_model * width)
    per_token = ACTIVATION_BYTES_PER_TOKEN_PER_D_MODEL * model.d_model
    if not flash_attention and checkpointing == "none":
        s = model.context if seq_len is None else seq_len
        per_token += ATTENTION_SCORE_BYTES_PER_TOKEN_PER_HEAD_PER_POSITION * model.heads * s
    return float(per_token * width)


def activation_bytes(
    model: ModelShape,
    tokens: int,
    precision: Precision = "mixed",
    checkpointing: Checkpointing = "none",
    flash_attention: bool = True,
    seq_len: int | None = None,
) -> float:
    """Activation bytes for ``tokens`` tokens per GPU per step, all layers.

    With full recomputation the backward pass also rebuilds one layer's full
    activations at a time, so that one layer is counted on top of the stored
    inputs: ``tokens * (2 h L + 34 h [+ 5 a s])``. Korthikanti et al.'s Table 2
    lists only the stored ``2 s b h L``; we add the one recomputed layer
    because it is really allocated at the backward pass's peak (one layer
    more: 1/L of what "none" keeps). ZeRO
    does not divide activations: ``tokens`` are this GPU's own.
    0 tokens give 0 bytes; negative tokens raise ValueError.
    """
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    if seq_len is None:
        seq_len = min(tokens, model.context) if tokens else model.context
    stored = (
        tokens
        * model.layers
        * activation_bytes_per_token_per_layer(model, precision, checkpointing, flash_attention, seq_len)
    )
    if checkpointing == "full":
        stored += tokens * activation_bytes_per_token_per_layer(model, precision, "none", flash_attention, seq_len)
    return float(stored)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU training memory, component by component, in bytes."""

    states: tuple[tuple[StateComponent, float], ...]  # (component, bytes on this GPU)
    activations: float

    @property
    def model_states(self) -> float:
        return float(sum(b for _, b in self.states))

    @property
    def total(self) -> float:
        return self.model_states + self.activations

    @property
    def bytes_per_param(self) -> float:
        return float(sum(c.bytes_per_param for c, _ in self.states))


def training_memory(
    model: ModelShape,
    tokens: int,
    precision: Precision = "mixed",
    optimizer: Optimizer = "adam",
    zero_stage: int = 0,
    gpus: int = 1,
    checkpointing: Checkpointing = "none",
    flash_attention: bool = True,
) -> MemoryBreakdown:
    """Everything step 1 draws: model states by component plus activations, per GPU."""
    states = state_bytes_by_component(model.params, precision, optimizer, zero_stage, gpus)
    acts = activation_bytes(model, tokens, precision, checkpointing, flash_attention)
    return MemoryBreakdown(states=states, activations=acts)


# --- what step 1 says about a breakdown -----------------------------------------------------------------------

BYTES_PER_GB = 10**9  # decimal gigabytes, as GPU datasheets and the lesson write them
Fit = Literal["states_over", "total_over", "fits"]


def split_bytes_per_param(
    precision: Precision = "mixed", optimizer: Optimizer = "adam", zero_stage: int = 0, gpus: int = 1
) -> tuple[float, float]:
    """Bytes of model state per parameter that every GPU keeps whole, and those ZeRO splits over ``gpus``.

    One GPU holds ``whole + split / gpus`` bytes a parameter: the ZeRO paper's
    ``4 + K/N`` at stage 1 and ``2 + (2 + K)/N`` at stage 2. Without ZeRO, or
    on one GPU, nothing is split: ``(bytes_per_param, 0)``.
    """
    whole = split = 0.0
    for c in state_components(precision, optimizer):
        if zero_divisor(c.group, zero_stage, gpus) == 1:
            whole += c.bytes_per_param
        else:
            split += c.bytes_per_param
    return whole, split


def activation_format(precision: Precision) -> str:
    """The format activations are stored in: 16-bit (``"fp16"``) with mixed precision, else ``"fp32"``."""
    return "fp16" if precision == "mixed" else "fp32"


def other_precision(precision: Precision) -> Precision:
    """The precision step 1 compares against: FP32 for mixed precision and the other way round."""
    return "fp32" if precision == "mixed" else "mixed"


def fit_on_gpu(memory: MemoryBreakdown, gpu_gb: float) -> Fit:
    """Whether a breakdown fits one GPU of ``gpu_gb`` decimal GB: the states alone too big, only the total, or all.

    Exactly full counts as fitting.
    """
    gpu_bytes = gpu_gb * BYTES_PER_GB
    if memory.model_states > gpu_bytes:
        return "states_over"
    if memory.total > gpu_bytes:
        return "total_over"
    return "fits"
