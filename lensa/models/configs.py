"""Published transformer configurations, their parameter counts, and custom sizes.

Every preset holds the numbers of its published configuration (the model's
``config.json`` on Hugging Face) and its published total parameter count,
with the source of both. :func:`parameter_count` rebuilds the total from the
architecture alone, so a reader can see where the parameters sit:

- token embeddings ``vocab * d``, plus learned position embeddings
  ``context * d`` for GPT-2;
- per layer, attention ``2 d^2 + 2 d * kv_heads * head_dim`` (query and output
  projections are ``d x d``; with grouped-query attention the key and value
  projections only produce ``kv_heads`` heads), the MLP (GPT-2: two matrices
  ``d x ffn`` with biases; Llama/Mistral: three, gate, up and down, no biases)
  and the norms (LayerNorm has a weight and a bias, RMSNorm a weight only);
- a final norm, and the ``lm_head`` ``vocab * d`` unless it is tied to the
  token embeddings.

All counts are numbers of parameters (not bytes). :meth:`ModelPreset.shape`
turns a preset into the :class:`lensa.models.memory.ModelShape` the memory and speed
models take; the count used there is the published one.

Custom sizes: :func:`shape_for_params` picks ``d_model`` and ``layers`` for a
bare parameter count (rule in its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from lensa.models.estimators import OthersComparison, how_others_count
from lensa.models.memory import ModelShape

MlpStyle = Literal["gpt2", "gated"]


@dataclass(frozen=True)
class ParamCount:
    """A model's parameters by where they sit (counts of parameters, not bytes)."""

    embeddings: int  # token embeddings
    positions: int  # learned position embeddings (GPT-2); 0 with rotary positions
    attention: int  # all layers, biases included
    mlp: int  # all layers, biases included
    norms: int  # the per-layer norms and the final norm
    lm_head: int  # 0 when tied to the token embeddings

    @property
    def total(self) -> int:
        return self.embeddings + self.positions + self.attention + self.mlp + self.norms + self.lm_head


@dataclass(frozen=True)
class ModelPreset:
    """One published transformer configuration and its published parameter count.

    ``context`` is the sequence length the model was trained on, in tokens
    (for Mistral 7B v0.1 that is 8192; its config allows 32768 positions and
    attends within a 4096-token ``sliding_window``). ``kv_heads`` is the number
    of key/value heads (grouped-query attention when below ``heads``).
    ``ffn`` is the MLP's intermediate size.
    """

    key: str
    name: str
    d_model: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int
    tied_embeddings: bool
    mlp: MlpStyle
    published_params: int
    config_source: str
    count_source: str
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        if self.mlp not in ("gpt2", "gated"):
            raise ValueError("mlp must be 'gpt2' or 'gated'")
        if min(self.d_model, self.layers, self.heads, self.kv_heads, self.ffn, self.vocab, self.context) < 1:
            raise ValueError("every size of a model must be positive")
        if self.d_model % self.heads or self.heads % self.kv_heads:
            raise ValueError("d_model must divide into heads, and heads into kv_heads groups")

    @property
    def head_dim(self) -> int:
        """Width of one attention head: d_model / heads."""
        return self.d_model // self.heads

    @property
    def source(self) -> str:
        """Both sources in one line, for a caption."""
        return f"Configuration: {self.config_source}. Parameter count: {self.count_source}."

    def parameters(self) -> ParamCount:
        """The parameter count rebuilt from the architecture, by component."""
        return parameter_count(self)

    def shape(self) -> ModelShape:
        """The :class:`ModelShape` the memory model takes, with the published parameter count."""
        return ModelShape(
            params=float(self.published_params),
            d_model=self.d_model,
            layers=self.layers,
            heads=self.heads,
            context=self.context,
        )

    def layer_params(self) -> int:
        """Parameters of one transformer block (attention, MLP and its norms)."""
        p = parameter_count(self)
        return (p.attention + p.mlp + p.norms - _final_norm(self)) // self.layers

    def largest_module_params(self) -> int:
        """The most parameters any single module holds directly, as DeepSpeed's ``model_to_params`` finds it.

        DeepSpeed sums ``m.parameters(recurse=False)`` per module, so this is
        the largest single matrix (with its bias): the token embedding or the
        ``lm_head`` (``vocab x d``) for every preset here. A tied ``lm_head``
        still shows the shared matrix as its own, so it counts the same.
        """
        d, bias = self.d_model, self.mlp == "gpt2"
        candidates = [self.vocab * d, d * d + bias * d, d * self.ffn + bias * self.ffn]
        if self.mlp == "gpt2":
            # GPT-2 computes queries, keys and values with one fused matrix (c_attn), d x 3d.
            kv = self.kv_heads * self.head_dim
            candidates += [d * (d + 2 * kv) + (d + 2 * kv), self.context * d]
        return max(candidates)

    def largest_block_params(self) -> int:
        """Largest "layer" as accelerate's ``calculate_maximum_sizes`` sees the base model (no ``lm_head``).

        accelerate treats each transformer block (a no-split module) as one
        layer and every leaf module outside the blocks as another: the token
        embeddings, GPT-2's position embeddings and the final norm.
        """
        candidates = [self.vocab * self.d_model, self.layer_params()]
        if self.mlp == "gpt2":
            candidates.append(self.context * self.d_model)
        return max(candidates)

    def how_others_count(self, gpus: int = 8) -> OthersComparison:
        """:func:`lensa.models.estimators.how_others_count` for this model, with its own embedding and largest
        module."""
        p = parameter_count(self)
        return how_others_count(
            self.shape(),
            gpus,
            largest_module_params=self.largest_module_params(),
            lm_head_params=p.lm_head,
            largest_block_params=self.largest_block_params(),
        )


def _final_norm(p: ModelPreset) -> int:
    # LayerNorm (GPT-2) has a weight and a bias; RMSNorm only a weight.
    return 2 * p.d_model if p.mlp == "gpt2" else p.d_model


def parameter_count(p: ModelPreset) -> ParamCount:
    """Parameters of ``p`` from its architecture alone (see the module docstring for the terms)."""
    d, layers = p.d_model, p.layers
    kv = p.kv_heads * p.head_dim  # width of the key (and of the value) projection
    attention = 2 * d * d + 2 * d * kv
    if p.mlp == "gpt2":
        attention += (d + 2 * kv) + d  # biases of the fused QKV projection and of the output projection
        mlp = 2 * d * p.ffn + p.ffn + d  # up and down matrices and their biases
        norms = 2 * 2 * d  # two LayerNorms per block, weight and bias
        positions = p.context * d
    else:
        mlp = 3 * d * p.ffn  # gate, up and down projections, no biases
        norms = 2 * d  # two RMSNorms per block, weight only
        positions = 0
    return ParamCount(
        embeddings=p.vocab * d,
        positions=positions,
        attention=layers * attention,
        mlp=layers * mlp,
        norms=layers * norms + _final_norm(p),
        lm_head=0 if p.tied_embeddings else p.vocab * d,
    )


# --- the presets --------------------------------------------------------------------------------

_HF = "config.json of the Hugging Face repository"
_COUNT_LLAMA = "the checkpoint's parameter tensors summed (BF16 safetensors total size / 2 bytes) and the model card"

# The lesson's 7B chat model has its shape.
_LLAMA2_7B = ModelPreset(
    "llama2-7b",
    "Llama 2 7B",
    4096,
    32,
    32,
    32,
    11008,
    32000,
    4096,
    False,
    "gated",
    6_738_415_616,
    f"{_HF} meta-llama/Llama-2-7b-hf",
    _COUNT_LLAMA,
)

PRESETS: dict[str, ModelPreset] = {
    p.key: p
    for p in (
        replace(
            _LLAMA2_7B,
            key="chat7b",
            name="The lesson's 7B chat model",
            published_params=6_740_000_000,
            config_source=f"Llama 2 7B's shape ({_HF} meta-llama/Llama-2-7b-hf)",
            count_source=(
                "Llama 2 7B's 6,738,415,616 rounded to 6.74e9, as the lesson does; this rounding gives its 117.0 GB"
            ),
        ),
        ModelPreset(
            "gpt2",
            "GPT-2 small (124M)",
            768,
            12,
            12,
            12,
            3072,
            50257,
            1024,
            True,
            "gpt2",
            124_439_808,
            f"{_HF} openai-community/gpt2 (n_embd 768, n_layer 12, n_head 12, inner size 4 x 768, "
            "n_positions 1024, lm_head tied to the token embeddings)",
            "the checkpoint's parameter tensors summed, tied lm_head counted once; published by OpenAI as '124M'",
        ),
        _LLAMA2_7B,
        ModelPreset(
            "llama2-13b",
            "Llama 2 13B",
            5120,
            40,
            40,
            40,
            13824,
            32000,
            4096,
            False,
            "gated",
            13_015_864_320,
            f"{_HF} meta-llama/Llama-2-13b-hf",
            _COUNT_LLAMA,
        ),
        ModelPreset(
            "llama2-70b",
            "Llama 2 70B",
            8192,
            80,
            64,
            8,
            28672,
            32000,
            4096,
            False,
            "gated",
            68_976_648_192,
            f"{_HF} meta-llama/Llama-2-70b-hf (grouped-query attention, 8 key/value heads)",
            _COUNT_LLAMA,
        ),
        ModelPreset(
            "llama3-8b",
            "Llama 3 8B",
            4096,
            32,
            32,
            8,
            14336,
            128256,
            8192,
            False,
            "gated",
            8_030_261_248,
            f"{_HF} meta-llama/Meta-Llama-3-8B",
            _COUNT_LLAMA,
        ),
        ModelPreset(
            "llama3-70b",
            "Llama 3 70B",
            8192,
            80,
            64,
            8,
            28672,
            128256,
            8192,
            False,
            "gated",
            70_553_706_496,
            f"{_HF} meta-llama/Meta-Llama-3-70B",
            _COUNT_LLAMA,
        ),
        ModelPreset(
            "mistral-7b",
            "Mistral 7B v0.1",
            4096,
            32,
            32,
            8,
            14336,
            32000,
            8192,
            False,
            "gated",
            7_241_732_096,
            f"{_HF} mistralai/Mistral-7B-v0.1 (its max_position_embeddings is 32768; trained on 8192-token "
            "sequences, attending within a 4096-token sliding window)",
            _COUNT_LLAMA,
            sliding_window=4096,
        ),
    )
}
"""The presets by key, the lesson's default first."""

DEFAULT_PRESET = "chat7b"


# --- custom sizes -------------------------------------------------------------------------------

# Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", sec. 2.1): a transformer's non-embedding
# parameters are about 12 * layers * d_model^2. The aspect ratio d_model / layers = 128 is Llama 2 7B's
# (4096 / 32) and 13B's (5120 / 40); Kaplan et al. found loss nearly flat over a wide range of it, so one
# ratio is a fair guess. Heads are 128 wide, as in every Llama preset here.
CUSTOM_ASPECT_RATIO = 128
CUSTOM_HEAD_DIM = 128


def shape_for_params(params: float, context: int = 4096) -> ModelShape:
    """A plausible shape for a model of ``params`` parameters.

    Rule: solve ``params = 12 * layers * d_model^2`` with
    ``d_model = 128 * layers`` (:data:`CUSTOM_ASPECT_RATIO`), round
    ``d_model`` to a multiple of 128 (at least 128), then take the whole
    number of layers closest to ``params / (12 * d_model^2)`` (at least 1);
    ``heads = d_model / 128``. The embeddings are not set aside, so a model
    whose parameters are mostly embeddings comes out a little deeper than the
    real one (6.74e9 gives d_model 4096 and 33 layers; Llama 2 7B has 32).
    The shape keeps ``params`` as given; only the activations use d_model,
    layers and heads.
    """
    if not params > 0:
        raise ValueError("params must be > 0")
    exact_layers = (params / (12 * CUSTOM_ASPECT_RATIO**2)) ** (1 / 3)
    d_model = max(1, round(CUSTOM_ASPECT_RATIO * exact_layers / CUSTOM_HEAD_DIM)) * CUSTOM_HEAD_DIM
    layers = max(1, round(params / (12 * d_model**2)))
    return ModelShape(
        params=float(params), d_model=d_model, layers=layers, heads=d_model // CUSTOM_HEAD_DIM, context=context
    )


def model_text_key(model_key: str) -> str:
    """The catalogue key (in step 1's section) that names a model choice: a key of :data:`PRESETS` or "custom".

    ``"model_"`` and the choice with its hyphens as underscores (``"llama2-7b"`` -> ``"model_llama2_7b"``):
    catalogue keys are snake_case, while the URL keeps the preset's own key.
    """
    return "model_" + model_key.replace("-", "_")


# With one GPU ZeRO splits nothing, so step 1's comparison of calculators shows a common node of eight instead.
COMPARISON_GPUS = 8


def others_comparison(model_key: str, model: ModelShape, gpus: int) -> OthersComparison:
    """How other calculators count ``model``'s states over ``gpus`` GPUs, or :data:`COMPARISON_GPUS` when one.

    A preset (``model_key`` in :data:`PRESETS`) brings its own embedding and
    largest layers; any other model gets the estimators' defaults.
    """
    count = gpus if gpus > 1 else COMPARISON_GPUS
    preset = PRESETS.get(model_key)
    return preset.how_others_count(count) if preset is not None else how_others_count(model, count)
