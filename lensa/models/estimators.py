"""How other tools count training memory: DeepSpeed's and Hugging Face accelerate's estimators.

Written out line for line from their sources (:data:`OTHER_TOOL_SOURCES`) so
a reader can set them next to the lesson's own count
(:func:`how_others_count`, which takes that from :mod:`lensa.models.memory`).

All sizes are in bytes. The tools print binary units: their "GB" is a GiB
(2**30 B), their "MB" a MiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lensa.models.memory import ModelShape, model_state_bytes

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
    the parameters. :meth:`lensa.models.configs.ModelPreset.how_others_count` fills all
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
    rows = _counted_rows(p, gpus, largest, acc)
    return OthersComparison(params=p, gpus=gpus, rows=rows, accelerate=acc)


def _counted_rows(p: float, gpus: int, largest: float, acc: AccelerateEstimate) -> tuple[OtherCount, ...]:
    """:func:`how_others_count`'s rows for ``p`` parameters on ``gpus`` GPUs, ``largest`` DeepSpeed's largest layer."""
    src = OTHER_TOOL_SOURCES
    lensa_src = "This lesson: ZeRO paper Fig. 1, 2 + 2 + 12 bytes a parameter"
    return (
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
