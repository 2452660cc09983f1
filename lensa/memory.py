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

Also here: the estimators of DeepSpeed and Hugging Face accelerate, written
out so a reader can compare (:func:`how_others_count`), and a byte-level
prediction of the live lab's MLP (:func:`lab_mlp_memory`).

All sizes are in bytes; the view converts to decimal gigabytes (1 GB = 1e9 B).
The other tools print binary units: their "GB" is a GiB (2**30 B), their "MB"
a MiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Precision = Literal["mixed", "fp32"]
Optimizer = Literal["adam", "sgd_momentum", "adam_8bit"]
Checkpointing = Literal["none", "selective", "full"]
Group = Literal["params", "grads", "optimizer"]

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

    key: Literal["weights", "gradients", "master", "momentum", "adam_m", "adam_v"]
    dtype: str  # "fp16", "fp32", "int8"
    bytes_per_param: float
    group: Group


_OPTIMIZER_STATES: dict[Optimizer, tuple[tuple[str, str, float], ...]] = {
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
    parts += [StateComponent(k, d, b, "optimizer") for k, d, b in _OPTIMIZER_STATES[optimizer]]  # type: ignore[arg-type]
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


# --- how others count ---------------------------------------------------------------------------

GIB = 2**30  # what DeepSpeed and accelerate print as "GB"

# One table of the tools' formulas and where they are written.
OTHER_TOOL_SOURCES: dict[str, str] = {
    "deepspeed_zero2": "DeepSpeed, deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs: "
    "2 P + 18 P / N bytes per GPU without offload (since PR #5099: 16-bit weights replicated; 16-bit and FP32 "
    "gradients, FP32 weights and Adam m, v partitioned); printed as bytes / 2**30 with the label 'GB'",
    "deepspeed_zero2_legacy": "DeepSpeed before PR #5099 and its docs: 4 P + 16 P / N bytes per GPU without offload",
    "deepspeed_zero3": "DeepSpeed, deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs: "
    "4 x largest layer + 18 P / N bytes per GPU without offload (the largest layer gathered whole, 4 B a "
    "parameter); printed as bytes / 2**30 with the label 'GB'",
    "accelerate": "Hugging Face accelerate, commands/estimate.py (accelerate estimate-memory): the model built "
    "with AutoModel (no lm_head); 'Training using Adam' is the largest of model, gradients, optimizer and step, "
    "not their sum; printed in binary units ('GB' = 2**30 B, 'MB' = 2**20 B)",
}

# DeepSpeed's bytes per parameter: 18 = 2 (16-bit grads) + 4 (FP32 grads) + 4 (FP32 weights) + 8 (Adam m, v).
DEEPSPEED_PARTITIONED_BYTES = 18
DEEPSPEED_REPLICATED_BYTES = 2  # the 16-bit weights under ZeRO-2
DEEPSPEED_LARGEST_LAYER_BYTES = 4  # ZeRO-3's gathered largest layer, per parameter
DEEPSPEED_CPU_BYTES = 4  # per parameter per GPU of the node, without offload, times the buffer factor


@dataclass(frozen=True)
class DeepSpeedEstimate:
    """What one of DeepSpeed's ``estimate_zero*_model_states_mem_needs`` returns, in bytes.

    ``gpu_bytes`` per GPU, ``cpu_bytes`` per node (both ``int`` as DeepSpeed
    truncates them); ``largest_layer_bytes`` is ZeRO-3's gather buffer (0 for
    ZeRO-2). Model states only: no activations, no temporary buffers.
    """

    gpu_bytes: int
    cpu_bytes: int
    largest_layer_bytes: int = 0


def _check_nodes(num_gpus_per_node: int, num_nodes: int, additional_buffer_factor: float) -> None:
    if num_gpus_per_node < 1 or num_nodes < 1:
        raise ValueError("need at least one GPU per node and one node")
    if not additional_buffer_factor > 0:
        raise ValueError("additional_buffer_factor must be > 0")


def deepspeed_zero2_estimate(
    total_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    additional_buffer_factor: float = 1.5,
    legacy: bool = False,
) -> DeepSpeedEstimate:
    """DeepSpeed's ZeRO-2 estimate without CPU offload (source: :data:`OTHER_TOOL_SOURCES`).

    GPU bytes per device: ``2 P + int(18 P / N)`` (``legacy``: the older
    ``4 P + int(16 P / N)``), N = all GPUs. CPU bytes per node:
    ``P * 4 * num_gpus_per_node * additional_buffer_factor``.
    For Llama 2 7B (P = 6,738,415,616) on 8 GPUs of one node: 26.67 GiB
    (legacy 37.65 GiB) per GPU, 301.23 GiB of CPU memory.
    """
    if total_params < 0:
        raise ValueError("total_params must be >= 0")
    _check_nodes(num_gpus_per_node, num_nodes, additional_buffer_factor)
    total_gpus = num_nodes * num_gpus_per_node
    if legacy:
        gpu = 4 * total_params + int(16 * total_params / total_gpus)
    else:
        gpu = DEEPSPEED_REPLICATED_BYTES * total_params + int(DEEPSPEED_PARTITIONED_BYTES * total_params / total_gpus)
    cpu = total_params * DEEPSPEED_CPU_BYTES * num_gpus_per_node * additional_buffer_factor
    return DeepSpeedEstimate(gpu_bytes=int(gpu), cpu_bytes=int(cpu))


def deepspeed_zero3_estimate(
    total_params: float,
    largest_layer_params: float,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
) -> DeepSpeedEstimate:
    """DeepSpeed's ZeRO-3 estimate without offload (source: :data:`OTHER_TOOL_SOURCES`).

    GPU bytes per device: ``4 L + int(18 P / N)`` with L the largest single
    module's parameters (DeepSpeed's ``model_to_params``). CPU bytes per node:
    ``4 * (L if zero_init else P) * num_gpus_per_node * additional_buffer_factor``.
    For Llama 2 7B on 8 GPUs (L = 32000 x 4096 = 131,072,000, the embedding):
    14.61 GiB per GPU.
    """
    if total_params < 0 or largest_layer_params < 0:
        raise ValueError("parameter counts must be >= 0")
    _check_nodes(num_gpus_per_node, num_nodes, additional_buffer_factor)
    total_gpus = num_nodes * num_gpus_per_node
    largest = DEEPSPEED_LARGEST_LAYER_BYTES * largest_layer_params
    gpu = largest + int(DEEPSPEED_PARTITIONED_BYTES * total_params / total_gpus)
    on_cpu = largest_layer_params if zero_init else total_params
    cpu = on_cpu * DEEPSPEED_CPU_BYTES * num_gpus_per_node * additional_buffer_factor
    return DeepSpeedEstimate(gpu_bytes=int(gpu), cpu_bytes=int(cpu), largest_layer_bytes=int(largest))


AccelerateDtype = Literal["float32", "float16"]
ACCELERATE_DTYPES: tuple[AccelerateDtype, ...] = ("float32", "float16")


@dataclass(frozen=True)
class AccelerateEstimate:
    """``accelerate estimate-memory``'s table for one model (source: :data:`OTHER_TOOL_SOURCES`).

    ``params``: what ``AutoModel`` holds, i.e. without a separate ``lm_head``;
    ``largest_layer_params``: its largest block or leaf module. Sizes in bytes
    at 4 B a parameter for "float32", half that for "float16". The tool also
    counts buffers (e.g. rotary frequencies, a few hundred bytes), left out.
    For Llama 2 7B (6,607,343,616 without lm_head): 24.61 / 12.31 GiB total,
    largest layer 772.03 / 386.02 MiB, training 98.46 / 49.23 GiB.
    """

    params: int
    largest_layer_params: int

    def _check(self, dtype: str) -> None:
        if dtype not in ACCELERATE_DTYPES:
            raise ValueError(f"dtype must be one of {ACCELERATE_DTYPES}")

    def model_bytes(self, dtype: AccelerateDtype = "float32") -> float:
        """The "Total Size" column: the weights in ``dtype``."""
        self._check(dtype)
        return 4.0 * self.params / (2 if dtype == "float16" else 1)

    def largest_layer_bytes(self, dtype: AccelerateDtype = "float32") -> float:
        """The "Largest Layer" column: the biggest block in ``dtype``."""
        self._check(dtype)
        return 4.0 * self.largest_layer_params / (2 if dtype == "float16" else 1)

    def training_terms(self, dtype: AccelerateDtype = "float32") -> dict[str, int]:
        """accelerate's ``estimate_training_usage`` terms in bytes, before it takes their maximum.

        float32: model 4P, gradients 4P, optimizer 8P, step 16P. float16 (mixed
        precision): model 4P, gradients 4P + 2P, optimizer 8P, step 8P.
        """
        self._check(dtype)
        fp32 = 4 * self.params
        fp16 = fp32 // 2
        if dtype == "float32":
            return {"model": fp32, "gradients": fp32, "optimizer": 2 * fp32, "step": 4 * fp32}
        return {"model": fp32, "gradients": fp32 + fp16, "optimizer": 2 * fp32, "step": 2 * fp32}

    def training_bytes(self, dtype: AccelerateDtype = "float32") -> int:
        """The "Training using Adam" column: the largest term (16 B a parameter in float32, 8 in float16)."""
        return max(self.training_terms(dtype).values())


def accelerate_estimate(params: float, largest_layer_params: float) -> AccelerateEstimate:
    """:class:`AccelerateEstimate` for a base model of ``params`` parameters (no lm_head)."""
    if params < 0 or largest_layer_params < 0:
        raise ValueError("parameter counts must be >= 0")
    return AccelerateEstimate(params=int(params), largest_layer_params=int(largest_layer_params))


@dataclass(frozen=True)
class OtherCount:
    """One line of "how others count": a tool's figure for the model states, in bytes."""

    key: str  # "lensa_zero2", "deepspeed_zero3", "accelerate_fp16", ...
    tool: str  # "Lensa", "DeepSpeed", "accelerate"
    zero_stage: int | None  # None: no partitioning (accelerate sizes one device)
    per_gpu: bool  # True: one of ``gpus`` GPUs; False: the whole model on one device
    bytes: float
    source: str

    @property
    def gb(self) -> float:
        """Decimal gigabytes (1e9 B), the lesson's unit."""
        return self.bytes / 1e9

    @property
    def gib(self) -> float:
        """Binary gigabytes (2**30 B), the unit DeepSpeed and accelerate print as "GB"."""
        return self.bytes / GIB


@dataclass(frozen=True)
class OthersComparison:
    """Model states of one model as this lesson, DeepSpeed and accelerate count them."""

    params: float
    gpus: int
    rows: tuple[OtherCount, ...]
    accelerate: AccelerateEstimate

    def row(self, key: str) -> OtherCount:
        """The row called ``key``; KeyError if absent."""
        for r in self.rows:
            if r.key == key:
                return r
        raise KeyError(key)


# Without a preset, assume a Llama 2-sized vocabulary: its embedding is then the largest module.
DEFAULT_VOCAB = 32_000


def how_others_count(
    model: ModelShape,
    gpus: int = 8,
    *,
    largest_module_params: float | None = None,
    lm_head_params: float = 0.0,
    largest_block_params: float | None = None,
) -> OthersComparison:
    """The model states per GPU as Lensa, DeepSpeed and accelerate count them, for mixed precision + Adam.

    Rows, in order: Lensa ZeRO-2 (2 + 14/N B a parameter) and ZeRO-3 (16/N),
    DeepSpeed ZeRO-2 (2 + 18/N), its older form (4 + 16/N), DeepSpeed ZeRO-3
    (4 L / P + 18/N), accelerate in float16 and float32 (8 and 16 B a
    parameter of the model without its lm_head, on one device).

    Where they agree: all three count model states only (no activations),
    and DeepSpeed partitions as the ZeRO paper does. Where they differ:
    DeepSpeed keeps an extra FP32 copy of the gradients (18 instead of 16
    bytes) and adds ZeRO-3's gather buffer for the largest layer; accelerate
    takes the largest of its terms instead of their sum, builds the model
    without its lm_head, and knows no ZeRO; both tools print GiB as "GB".

    ``largest_module_params`` (DeepSpeed's largest layer) defaults to an
    embedding of :data:`DEFAULT_VOCAB` tokens; ``lm_head_params`` (what
    accelerate leaves out) to 0; ``largest_block_params`` (accelerate's
    largest layer) to the larger of that embedding and one layer's share of
    the parameters. :meth:`lensa.models.ModelPreset.how_others_count` fills all
    three from a real configuration.
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError("gpus must be a whole number >= 1")
    p = model.params
    embedding = DEFAULT_VOCAB * model.d_model
    largest = embedding if largest_module_params is None else largest_module_params
    block = max(embedding, p / model.layers) if largest_block_params is None else largest_block_params
    if not 0 <= lm_head_params < p:
        raise ValueError("lm_head_params must be >= 0 and below the model's parameters")
    acc = accelerate_estimate(p - lm_head_params, block)
    src = OTHER_TOOL_SOURCES
    lensa_src = "This lesson: ZeRO paper Fig. 1, 2 + 2 + 12 bytes a parameter"
    rows = (
        OtherCount("lensa_zero2", "Lensa", 2, True, model_state_bytes(p, "mixed", "adam", 2, gpus), lensa_src),
        OtherCount("lensa_zero3", "Lensa", 3, True, model_state_bytes(p, "mixed", "adam", 3, gpus), lensa_src),
        OtherCount(
            "deepspeed_zero2", "DeepSpeed", 2, True, deepspeed_zero2_estimate(p, gpus).gpu_bytes, src["deepspeed_zero2"]
        ),
        OtherCount(
            "deepspeed_zero2_legacy",
            "DeepSpeed",
            2,
            True,
            deepspeed_zero2_estimate(p, gpus, legacy=True).gpu_bytes,
            src["deepspeed_zero2_legacy"],
        ),
        OtherCount(
            "deepspeed_zero3",
            "DeepSpeed",
            3,
            True,
            deepspeed_zero3_estimate(p, largest, gpus).gpu_bytes,
            src["deepspeed_zero3"],
        ),
        OtherCount("accelerate_fp16", "accelerate", None, False, acc.training_bytes("float16"), src["accelerate"]),
        OtherCount("accelerate_fp32", "accelerate", None, False, acc.training_bytes("float32"), src["accelerate"]),
    )
    return OthersComparison(params=p, gpus=gpus, rows=rows, accelerate=acc)


# --- the live lab's MLP -------------------------------------------------------------------------

LabArm = Literal["fp32", "fp16", "bf16"]
LAB_ARMS: tuple[LabArm, ...] = ("fp32", "fp16", "bf16")

# Bytes per parameter PyTorch AMP keeps for the whole run: autocast casts per operation and leaves the
# parameters in FP32, so there is no separate master copy and the gradients (.grad) are FP32 too.
LAB_WEIGHT_BYTES = 4
LAB_GRAD_BYTES = 4
LAB_ADAM_BYTES = 8  # torch.optim.Adam's exp_avg and exp_avg_sq, FP32
# torch.optim.Adam's default on CUDA (foreach) builds sqrt(exp_avg_sq) for every parameter at once.
LAB_ADAM_TEMP_BYTES = 4
LAB_SAMPLE_BYTES_PER_COLUMN = 4  # inputs and labels are FP32


@dataclass(frozen=True)
class LabMemory:
    """Predicted memory of one arm of the live lab (:func:`lensa.live.compare`), in bytes.

    Model states: ``weights``, ``gradients`` and ``optimizer`` (Adam) for
    ``params`` parameters. Saved for backward, term by term, exactly the
    tensors :attr:`lensa.live.ArmResult.saved_for_backward_bytes` counts:
    ``layer_inputs`` (each Linear layer's input: the batch, then every ReLU
    output, which the ReLU and the next Linear share), ``weight_copies`` (the
    16-bit weights autocast made and matmuls kept), ``loss_inputs`` (FP32
    logits and targets) and ``scaler`` (the FP16 arm's loss scale). ``data``:
    the samples resident on the device; ``in_data`` is the part of the saved
    tensors that are views into those samples (counted by the measurement,
    but not extra memory). ``peak`` is the phase model of
    :func:`lab_mlp_memory`, the prediction for ``torch.cuda.max_memory_allocated``.
    """

    arm: str
    params: int
    weights: int
    gradients: int
    optimizer: int
    layer_inputs: int
    weight_copies: int
    loss_inputs: int
    scaler: int
    data: int
    in_data: int
    peak: int

    @property
    def model_states(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def saved_for_backward(self) -> int:
        """What lensa.live measures as ``saved_for_backward_bytes``."""
        return self.layer_inputs + self.weight_copies + self.loss_inputs + self.scaler

    @property
    def total(self) -> int:
        """The lesson's sum: model states + saved tensors + data, each counted once.

        An upper bound of sorts for the states and activations (the gradients do
        not exist yet while all activations do), but it leaves out temporaries;
        ``peak`` is the better guess for the measured peak.
        """
        return self.model_states + self.saved_for_backward - self.in_data + self.data


def _whole(name: str, value: int, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number >= {low} (got {value!r})")


def lab_mlp_memory(
    width: int,
    depth: int,
    features: int,
    batch_size: int,
    arm: LabArm = "bf16",
    resident_samples: int | None = None,
) -> LabMemory:
    """Predict the live lab's memory for one arm, byte by byte.

    The model is lensa.live's MLP: ``features`` -> ``depth`` x (Linear
    ``width`` + ReLU) -> Linear 1, BCEWithLogitsLoss, Adam; c = 4 bytes for
    "fp32", 2 under autocast ("fp16", "bf16"). With B = ``batch_size``, F =
    ``features``, W = ``width``, L = ``depth``, autograd saves:

    - the first Linear's input, B F c (under autocast its 16-bit copy; in FP32
      the batch itself, a view into the data); no weight: the batch needs no
      gradient, so the first layer's weight is not kept;
    - each ReLU output, B W c, L of them; the next Linear saves the same tensor;
    - under autocast the 16-bit weight of every later Linear, 2 W^2 (L - 1) + 2 W
      (autocast casts every weight and bias per step; the first weight and the
      biases are dropped when the autocast block ends, as no matmul kept them);
    - for the loss, the logits in FP32 and the FP32 targets, 4 B each;
    - FP16 only: GradScaler's 4-byte scale, kept by the ``loss * scale`` product.

    Checked on the CPU against :func:`lensa.live.compare`'s measurement: equal
    to the byte (tests/test_memory_calculators.py).

    ``peak`` predicts ``torch.cuda.max_memory_allocated`` from the second step
    on, as the largest of three moments, on top of the FP32 weights, Adam's m
    and v (12 B a parameter) and ``resident_samples`` x (F + 1) x 4 bytes of
    data (default: one batch; lensa.live keeps its whole training pool and
    the evaluation set on the device, ``cfg.train_batches("cuda") *
    batch_size + eval_size`` samples):

    1. end of forward: every saved tensor plus autocast's cached 16-bit copies
       of the first weight and the biases;
    2. backward, layer by layer from the top: the FP32 gradients made so far,
       the saved tensors not yet released, the incoming and outgoing
       activation gradients and the layer's weight gradient (under autocast
       in 16 bits and then in FP32);
    3. the optimizer step: FP32 gradients plus foreach Adam's temporary
       sqrt(v), 8 B a parameter.

    It leaves out the CUDA caching allocator's rounding of every block to a
    multiple of 512 B (it matters for the many small tensors: biases,
    scalars), cuBLAS's workspace, the loss and scale scalars, and any other
    temporary a kernel may allocate; the CUDA context is not in
    ``max_memory_allocated`` at all. Unchecked here (no GPU on the build
    machine), so read it as an estimate.
    """
    for name, value in (("width", width), ("depth", depth), ("features", features), ("batch_size", batch_size)):
        _whole(name, value)
    if arm not in LAB_ARMS:
        raise ValueError(f"arm must be one of {LAB_ARMS}")
    if resident_samples is None:
        resident_samples = batch_size
    _whole("resident_samples", resident_samples, 0)
    b, w = batch_size, width
    autocast = arm != "fp32"
    c = 2 if autocast else 4  # bytes of the compute dtype
    dims = [(features, w)] + [(w, w)] * (depth - 1) + [(w, 1)]  # (in, out) of each Linear
    params = sum(i * o + o for i, o in dims)

    # Saved for backward, per Linear: its input and (autocast, not the first layer) its 16-bit weight.
    inputs = [b * i * c for i, _ in dims]
    copies = [2 * i * o if autocast and k > 0 else 0 for k, (i, o) in enumerate(dims)]
    first_input_in_data = 0 if autocast else inputs[0]  # in FP32 the first input is the batch itself
    loss_inputs = 2 * b * 4  # FP32 logits and targets
    scaler = 4 if arm == "fp16" else 0
    in_data = first_input_in_data + b * 4  # the batch (FP32 arm) and the targets are views into the data
    data = resident_samples * (features + 1) * LAB_SAMPLE_BYTES_PER_COLUMN

    resident = params * (LAB_WEIGHT_BYTES + LAB_ADAM_BYTES) + data
    extra = [inputs[k] + copies[k] for k in range(len(dims))]
    extra[0] -= first_input_in_data
    saved_extra = sum(extra) + b * 4 + scaler  # + the FP32 logits
    biases = sum(o for _, o in dims)
    cache_only = 2 * (dims[0][0] * dims[0][1] + biases) if autocast else 0
    moments = [resident + saved_extra + cache_only]

    grads = 0  # FP32 gradients accumulated so far, walking down from the top layer
    for k in range(len(dims) - 1, -1, -1):
        i, o = dims[k]
        below = sum(extra[:k])  # saved tensors of the layers under this one
        # This layer's input outlives its matmul's backward: ReLU k-1 saved the same tensor. The first
        # layer's input has no ReLU under it, so it goes with the matmul.
        mine = inputs[k] if k else 0
        g_out = b * o * c
        g_in = b * i * c if k else 0  # the batch needs no gradient
        g_w16 = (i * o + o) * c
        moments.append(resident + grads + below + extra[k] + g_out + g_in + g_w16)
        if autocast:  # the 16-bit weight gradient is cast to the FP32 .grad while the 16-bit one still lives
            moments.append(resident + grads + below + mine + g_in + g_w16 + 4 * (i * o + o))
        grads += 4 * (i * o + o)
        if k:  # ReLU backward: its saved output, the incoming gradient and the outgoing one
            moments.append(resident + grads + below + mine + 2 * g_in)
    moments.append(resident + params * (LAB_GRAD_BYTES + LAB_ADAM_TEMP_BYTES))

    return LabMemory(
        arm=arm,
        params=params,
        weights=params * LAB_WEIGHT_BYTES,
        gradients=params * LAB_GRAD_BYTES,
        optimizer=params * LAB_ADAM_BYTES,
        layer_inputs=sum(inputs),
        weight_copies=sum(copies),
        loss_inputs=loss_inputs,
        scaler=scaler,
        data=data,
        in_data=in_data,
        peak=max(moments),
    )
