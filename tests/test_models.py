"""Model presets: published configurations, parameter counts rebuilt from the architecture, custom sizes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lensa.models.configs import (
    CUSTOM_ASPECT_RATIO,
    DEFAULT_PRESET,
    PRESETS,
    ModelPreset,
    parameter_count,
    shape_for_params,
)
from lensa.models.memory import SEVEN_B, ModelShape, training_memory
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels]  # rerun by make test-kernels

# Published parameter counts, each from its checkpoint, not from our table: the parameter count the
# Hugging Face Hub reads from each repository's safetensors metadata (the "Model size" of the model page,
# BF16 tensors only; buffers such as old Llama checkpoints' rotary inv_freq are not parameters), which is
# also sum(p.numel() for p in model.parameters()) after from_pretrained.
PUBLISHED_COUNTS = {
    "gpt2": 124_439_808,  # openai-community/gpt2 (tied lm_head counted once; the card's "124M")
    "llama2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf
    "llama2-13b": 13_015_864_320,  # meta-llama/Llama-2-13b-hf
    "llama2-70b": 68_976_648_192,  # meta-llama/Llama-2-70b-hf
    "llama3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B
    "llama3-70b": 70_553_706_496,  # meta-llama/Meta-Llama-3-70B
    "mistral-7b": 7_241_732_096,  # mistralai/Mistral-7B-v0.1
}


def test_published_counts_are_the_checkpoints():
    assert set(PRESETS) == {*PUBLISHED_COUNTS, "chat7b"}
    for key, count in PUBLISHED_COUNTS.items():
        assert PRESETS[key].published_params == count, key
        assert PRESETS[key].config_source and PRESETS[key].count_source and PRESETS[key].name


def test_architecture_counts_reproduce_the_published_counts():
    # The count rebuilt from each preset's shape (d_model, layers, heads, kv_heads, ffn, vocab, tying) equals
    # the checkpoint's to the parameter: a wrong number anywhere in the shape changes it.
    for key, count in PUBLISHED_COUNTS.items():
        assert parameter_count(PRESETS[key]).total == count, key
    # the lesson's model is Llama 2 7B with its count rounded, as the lesson does
    assert parameter_count(PRESETS["chat7b"]).total == PUBLISHED_COUNTS["llama2-7b"]
    assert PRESETS["chat7b"].published_params == 6.74e9
    # the architectures the counts assume: GPT-2's plain MLP, everyone else's gated one; Mistral's window
    assert {k: p.mlp for k, p in PRESETS.items()} == {k: "gpt2" if k == "gpt2" else "gated" for k in PRESETS}
    assert PRESETS["mistral-7b"].sliding_window == 4096  # config.json of mistralai/Mistral-7B-v0.1


def _build_on_meta(p: ModelPreset):
    """The preset's architecture as torch modules on the meta device (shapes only, no memory).

    Laid out as Hugging Face's GPT2LMHeadModel and LlamaForCausalLM/MistralForCausalLM lay it out (module names
    included), from the config numbers alone: a second construction, by torch, of what parameter_count adds up.
    """
    import torch
    from torch import nn

    d, kv = p.d_model, p.kv_heads * p.head_dim
    with torch.device("meta"):
        root = nn.Module()
        if p.mlp == "gpt2":
            root.wte, root.wpe = nn.Embedding(p.vocab, d), nn.Embedding(p.context, d)
            blocks = []
            for _ in range(p.layers):
                b = nn.Module()
                b.ln_1, b.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
                b.attn = nn.ModuleDict({"c_attn": nn.Linear(d, d + 2 * kv), "c_proj": nn.Linear(d, d)})
                b.mlp = nn.ModuleDict({"c_fc": nn.Linear(d, p.ffn), "c_proj": nn.Linear(p.ffn, d)})
                blocks.append(b)
            root.h, root.ln_f = nn.ModuleList(blocks), nn.LayerNorm(d)
            root.embed = root.wte
        else:
            root.embed_tokens = nn.Embedding(p.vocab, d)
            blocks = []
            for _ in range(p.layers):
                b = nn.Module()
                b.input_layernorm, b.post_attention_layernorm = nn.RMSNorm(d), nn.RMSNorm(d)
                b.self_attn = nn.ModuleDict(
                    {
                        "q_proj": nn.Linear(d, d, bias=False),
                        "k_proj": nn.Linear(d, kv, bias=False),
                        "v_proj": nn.Linear(d, kv, bias=False),
                        "o_proj": nn.Linear(d, d, bias=False),
                    }
                )
                b.mlp = nn.ModuleDict({k: nn.Linear(d, p.ffn, bias=False) for k in ("gate_proj", "up_proj")})
                b.mlp["down_proj"] = nn.Linear(p.ffn, d, bias=False)
                blocks.append(b)
            root.layers, root.norm = nn.ModuleList(blocks), nn.RMSNorm(d)
            root.embed = root.embed_tokens
        root.lm_head = nn.Linear(d, p.vocab, bias=False)
        if p.tied_embeddings:
            root.lm_head.weight = root.embed.weight  # one tensor: named_parameters() yields it once
    assert all(t.is_meta for t in root.parameters())
    return root, blocks


@requires_torch
@pytest.mark.parametrize("key", list(PRESETS))
def test_where_the_parameters_sit_as_torch_builds_them(key):
    p = PRESETS[key]
    root, blocks = _build_on_meta(p)
    where = dict.fromkeys(("embeddings", "positions", "attention", "mlp", "norms", "lm_head"), 0)
    for name, t in root.named_parameters():  # shared (tied) tensors come once, as the Hub's count has them
        part = next(
            part
            for needle, part in (
                ("wte", "embeddings"),
                ("embed_tokens", "embeddings"),
                ("wpe", "positions"),
                ("attn", "attention"),
                ("mlp", "mlp"),
                ("norm", "norms"),
                ("ln_", "norms"),
                ("lm_head", "lm_head"),
            )
            if needle in name
        )
        where[part] += t.numel()
    assert parameter_count(p).__dict__ == where
    assert parameter_count(p).total == sum(t.numel() for t in root.parameters())
    # one block as torch sees it, and DeepSpeed's and accelerate's largest units, from the modules themselves
    assert p.layer_params() == sum(t.numel() for t in blocks[0].parameters())
    direct = [sum(t.numel() for t in m.parameters(recurse=False)) for m in root.modules()]
    assert p.largest_module_params() == max(direct)
    leaves_outside_blocks = [m for n, m in root.named_children() if n not in ("h", "layers", "lm_head", "embed")]
    units = [sum(t.numel() for t in m.parameters()) for m in [*leaves_outside_blocks, blocks[0]]]
    assert p.largest_block_params() == max(units)


def test_presets_become_model_shapes():
    assert DEFAULT_PRESET == "chat7b" and next(iter(PRESETS)) == "chat7b"
    assert PRESETS["chat7b"].shape() == SEVEN_B
    assert round(training_memory(PRESETS["chat7b"].shape(), 2048).total / 1e9, 1) == 117.0
    s = PRESETS["llama3-8b"].shape()
    assert s == ModelShape(params=8_030_261_248, d_model=4096, layers=32, heads=32, context=8192)
    assert PRESETS["llama2-70b"].head_dim == 128 and PRESETS["gpt2"].head_dim == 64


def test_largest_modules_as_the_tools_find_them():
    # DeepSpeed: the largest single module is the vocabulary matrix for all of these
    assert PRESETS["llama2-7b"].largest_module_params() == 131_072_000
    assert PRESETS["llama3-70b"].largest_module_params() == 128256 * 8192
    # accelerate: a Llama 2 7B decoder block (809,533,440 B in FP32, its "772.03 MB") beats the embedding
    assert PRESETS["llama2-7b"].largest_block_params() == 202_383_360
    assert PRESETS["llama3-8b"].largest_block_params() == 128256 * 4096


def test_invalid_presets_are_refused():
    base = PRESETS["llama2-7b"]
    fields = dict(base.__dict__)
    with pytest.raises(ValueError):
        ModelPreset(**{**fields, "heads": 33})  # 4096 does not split into 33 heads
    with pytest.raises(ValueError):
        ModelPreset(**{**fields, "kv_heads": 3})
    with pytest.raises(ValueError):
        ModelPreset(**{**fields, "mlp": "moe"})
    with pytest.raises(ValueError):
        ModelPreset(**{**fields, "layers": 0})


def test_shape_for_params_follows_its_rule():
    for params in (1e8, 1.24e8, 1e9, 6.74e9, 7e10, 1e12):
        s = shape_for_params(params)
        assert s.params == params and s.d_model % 128 == 0 and s.heads == s.d_model // 128
        # the nearest whole number of layers: 12 L d^2 is within half a layer of the count
        assert abs(12 * s.layers * s.d_model**2 - params) <= 6 * s.d_model**2
        # and d_model / layers stays near the chosen aspect ratio
        assert 0.5 < s.d_model / s.layers / CUSTOM_ASPECT_RATIO < 2
    s = shape_for_params(6.74e9)
    assert (s.d_model, s.layers, s.context) == (4096, 33, 4096)
    assert shape_for_params(1000).layers == 1  # tiny counts still give a valid shape
    with pytest.raises(ValueError):
        shape_for_params(0)


def test_models_import_no_view_or_torch():
    code = (
        "import sys, lensa.models.configs; bad = [m for m in ('streamlit', 'plotly', 'torch') if m in sys.modules];"
        "print(bad); sys.exit(bool(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_model_choice_has_a_distinct_name_in_both_catalogues():
    from lensa.models.configs import model_text_key
    from lensa.ui import i18n
    from lensa.ui.site import PAGES_BY_KEY

    choices = PAGES_BY_KEY["memory"].control("model").options  # type: ignore[attr-defined]
    keys = [model_text_key(k) for k in choices]
    assert len(set(keys)) == len(choices) and "custom" in choices
    # Catalogue keys are snake_case words (lensa/text/README.md): letters, digits and underscores only.
    assert all(k.startswith("model_") and k.replace("_", "").isalnum() and k == k.lower() for k in keys), keys
    for lang in i18n.LANGUAGES:
        names = [i18n.catalogue(lang).get(f"memory.{k}") for k in keys]
        assert all(names) and len(set(names)) == len(names), (lang, dict(zip(keys, names, strict=True)))
