"""Memory against the papers (ZeRO, Korthikanti et al.), the tools' own estimators, and the live lab."""

from __future__ import annotations

import pytest

from lensa.models.configs import PRESETS
from lensa.models.estimators import (
    accelerate_estimate,
    deepspeed_zero2_estimate,
    deepspeed_zero3_estimate,
    how_others_count,
)
from lensa.models.lab_memory import lab_mlp_memory
from lensa.models.memory import SEVEN_B, ModelShape, activation_bytes, model_state_bytes, training_memory
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels

LLAMA2_7B = 6_738_415_616
GIB = 2**30


def gib(x: float) -> str:
    """As DeepSpeed and accelerate print it: bytes / 2**30 to two decimals."""
    return f"{x / GIB:.2f}"


# --- ZeRO (Rajbhandari et al. 2019, Fig. 1) ------------------------------------------------------


@pytest.mark.parametrize("psi", [1.0, 7.5e9, 6.74e9, 1.75e11])
@pytest.mark.parametrize("n", [1, 2, 8, 64, 1024])
def test_zero_stages_follow_the_paper(psi, n):
    k = 12  # mixed-precision Adam: FP32 master weight, m and v
    paper = {
        0: (2 + 2 + k) * psi,
        1: 2 * psi + 2 * psi + k * psi / n,
        2: 2 * psi + (2 + k) * psi / n,
        3: (2 + 2 + k) * psi / n,
    }
    for stage, expected in paper.items():
        assert model_state_bytes(psi, "mixed", "adam", stage, n) == pytest.approx(expected, rel=1e-12)


def test_zero_paper_example_75b_on_64_gpus():
    got = [round(model_state_bytes(7.5e9, "mixed", "adam", s, 64) / 1e9, 1) for s in range(4)]
    assert got == [120.0, 31.4, 16.6, 1.9]


def test_llama2_70b_zero3_on_8_gpus():
    p = PRESETS["llama2-70b"].published_params
    m = training_memory(PRESETS["llama2-70b"].shape(), 4096, zero_stage=3, gpus=8)
    assert m.model_states == pytest.approx(p * 16 / 8)
    assert m.model_states / 1e9 == pytest.approx(137.95, abs=0.01)


def test_activations_are_not_divided_by_zero():
    alone = training_memory(SEVEN_B, 4096)
    for stage in (1, 2, 3):
        assert training_memory(SEVEN_B, 4096, zero_stage=stage, gpus=8).activations == alone.activations


# --- activations (Korthikanti et al. 2022) --------------------------------------------------------


def test_korthikanti_activations():
    s, b = 2048, 3
    m = ModelShape(params=1e9, d_model=1024, layers=10, heads=16, context=s)
    h, a, L = m.d_model, m.heads, m.layers
    tokens = s * b
    no_flash = activation_bytes(m, tokens, "mixed", "none", flash_attention=False)
    assert no_flash == L * s * b * h * (34 + 5 * a * s / h)  # eq. (1), every layer
    flash = activation_bytes(m, tokens, "mixed", "none", flash_attention=True)
    selective = activation_bytes(m, tokens, "mixed", "selective", flash_attention=False)
    assert flash == selective == 34 * s * b * h * L
    # full recomputation: 2 s b h per layer kept, plus the one layer rebuilt during backward
    assert activation_bytes(m, tokens, "mixed", "full") == 2 * s * b * h * L + 34 * s * b * h
    assert activation_bytes(m, tokens, "mixed", "full", flash_attention=False) == 2 * s * b * h * L + s * b * h * (
        34 + 5 * a * s / h
    )
    # the score term is what makes long sequences expensive without FlashAttention
    assert no_flash / flash == pytest.approx(1 + 5 * a * s / (34 * h))


# --- DeepSpeed and accelerate, as they print for Llama 2 7B on 1 node x 8 GPUs ------------------------


def test_deepspeed_zero2_reproduces_the_tool():
    est = deepspeed_zero2_estimate(LLAMA2_7B, num_gpus_per_node=8)
    assert est.gpu_bytes == 2 * LLAMA2_7B + int(18 * LLAMA2_7B / 8)
    assert gib(est.gpu_bytes) == "26.67" and gib(est.cpu_bytes) == "301.23"
    assert gib(deepspeed_zero2_estimate(LLAMA2_7B, 8, legacy=True).gpu_bytes) == "37.65"
    # 2 nodes x 4 GPUs: the GPU figure depends on all 8 GPUs, the CPU figure on the 4 of a node
    two = deepspeed_zero2_estimate(LLAMA2_7B, num_gpus_per_node=4, num_nodes=2)
    assert two.gpu_bytes == est.gpu_bytes and two.cpu_bytes == est.cpu_bytes // 2


def test_deepspeed_zero3_reproduces_the_tool():
    largest = PRESETS["llama2-7b"].largest_module_params()
    est = deepspeed_zero3_estimate(LLAMA2_7B, largest, num_gpus_per_node=8)
    assert est.largest_layer_bytes == 4 * 131_072_000
    assert gib(est.gpu_bytes) == "14.61"
    assert est.cpu_bytes == int(4 * largest * 8 * 1.5)  # zero_init: only the largest layer on the CPU


def test_accelerate_reproduces_the_tool():
    no_head = LLAMA2_7B - 32000 * 4096  # AutoModel builds LlamaModel, without the lm_head
    assert no_head == 6_607_343_616
    est = accelerate_estimate(no_head, PRESETS["llama2-7b"].largest_block_params())
    assert gib(est.model_bytes("float32")) == "24.61" and gib(est.model_bytes("float16")) == "12.31"
    mb = [f"{est.largest_layer_bytes(d) / 2**20:.2f}" for d in ("float32", "float16")]
    assert mb == ["772.03", "386.02"]
    assert gib(est.training_bytes("float32")) == "98.46" and gib(est.training_bytes("float16")) == "49.23"
    # the maximum of the terms, not their sum
    terms = est.training_terms("float16")
    assert est.training_bytes("float16") == max(terms.values()) < sum(terms.values())
    with pytest.raises(ValueError):
        est.training_bytes("int4")  # type: ignore[arg-type]


def test_how_others_count_for_a_preset():
    cmp = PRESETS["llama2-7b"].how_others_count(8)
    assert [r.key for r in cmp.rows] == [
        "lensa_zero2",
        "lensa_zero3",
        "deepspeed_zero2",
        "deepspeed_zero2_legacy",
        "deepspeed_zero3",
        "accelerate_fp16",
        "accelerate_fp32",
    ]
    assert f"{cmp.row('deepspeed_zero2').gib:.2f}" == "26.67"
    assert f"{cmp.row('deepspeed_zero3').gib:.2f}" == "14.61"
    assert f"{cmp.row('accelerate_fp16').gib:.2f}" == "49.23"
    assert f"{cmp.row('accelerate_fp32').gib:.2f}" == "98.46"
    p = LLAMA2_7B
    assert cmp.row("lensa_zero2").bytes == 2 * p + 14 * p / 8
    assert cmp.row("lensa_zero3").bytes == 16 * p / 8
    assert cmp.row("lensa_zero3").gb == pytest.approx(16 * p / 8 / 1e9)
    # DeepSpeed's extra FP32 gradient copy: 18 instead of 14 partitioned bytes a parameter
    gap = cmp.row("deepspeed_zero2").bytes - cmp.row("lensa_zero2").bytes
    assert gap == pytest.approx(4 * p / 8, abs=1)
    assert all(r.source for r in cmp.rows)
    with pytest.raises(KeyError):
        cmp.row("megatron")


def test_how_others_count_for_a_bare_shape():
    cmp = how_others_count(SEVEN_B, 64)
    assert cmp.accelerate.params == int(SEVEN_B.params)  # no lm_head known: nothing left out
    assert cmp.row("deepspeed_zero3").bytes == 4 * 32000 * 4096 + int(18 * SEVEN_B.params / 64)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError):
            how_others_count(SEVEN_B, bad)  # type: ignore[arg-type]


# --- the live lab's MLP ---------------------------------------------------------------------------


def test_lab_saved_tensors_by_hand():
    # width 8, depth 1, 2 features, batch 8. BF16: input copy 8*2*2 + ReLU output 8*8*2 + last weight 8*2
    # + FP32 logits 8*4 + targets 8*4 = 32 + 128 + 16 + 32 + 32
    assert lab_mlp_memory(8, 1, 2, 8, "bf16").saved_for_backward == 240
    assert lab_mlp_memory(8, 1, 2, 8, "fp16").saved_for_backward == 244  # + the 4-byte loss scale
    # FP32: the batch 8*2*4 + ReLU output 8*8*4 + logits + targets, no weight copies
    assert lab_mlp_memory(8, 1, 2, 8, "fp32").saved_for_backward == 64 + 256 + 64


def test_lab_states_and_peak():
    from lensa.live import RunConfig

    cfg = RunConfig(width=512, depth=3, batch_size=1024, features=64)
    m = lab_mlp_memory(cfg.width, cfg.depth, cfg.features, cfg.batch_size, "bf16")
    assert m.params == cfg.parameters()
    # the states and the data, byte by byte: test_lab_resident_bytes_are_the_tensors_a_cpu_step_keeps
    # the optimizer step holds weights, m, v, gradients and foreach Adam's sqrt(v): 20 B a parameter
    assert m.peak >= 20 * m.params + m.data
    # autocast halves the activations, so BF16 peaks lower than FP32 here
    assert m.peak < lab_mlp_memory(512, 3, 64, 1024, "fp32").peak
    with pytest.raises(ValueError):
        lab_mlp_memory(512, 0, 64, 1024)
    with pytest.raises(ValueError):
        lab_mlp_memory(512, 3, 64, 1024, "fp8")  # type: ignore[arg-type]


@requires_torch
def test_lab_prediction_matches_the_measured_saved_tensors():
    from lensa import live

    for width, depth, features, batch in ((8, 1, 2, 8), (32, 2, 16, 64), (128, 3, 48, 256)):
        cfg = live.RunConfig(
            width=width,
            depth=depth,
            features=features,
            batch_size=batch,
            steps=1,
            warmup_steps=1,
            eval_size=64,
            device="cpu",
        )
        result = live.compare(cfg, arms=("fp32", "bf16", "fp16"))
        assert set(result.arms) == {"fp32", "bf16", "fp16"}
        for arm, measured in result.arms.items():
            predicted = lab_mlp_memory(width, depth, features, batch, arm).saved_for_backward  # type: ignore[arg-type]
            assert predicted == measured.saved_for_backward_bytes, (width, depth, features, batch, arm)


@requires_torch
@pytest.mark.parametrize("arm", ["fp32", "bf16"])
def test_lab_resident_bytes_are_the_tensors_a_cpu_step_keeps(arm):
    # The floor of every moment of the predicted peak (weights, gradients, Adam's moments, the data on the
    # device), weighed on the tensors one real CPU step of the lab's own model keeps alive.
    import torch

    from lensa.live.task import _build_mlp, _make_data

    width, depth, features, batch, samples = 48, 3, 20, 32, 96
    model = _build_mlp(features, width, depth)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = _make_data(samples, features, torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=arm == "bf16"):
        loss = torch.nn.BCEWithLogitsLoss()(model(x[:batch]), y[:batch])
    loss.backward()
    opt.step()

    def nbytes(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    predicted = lab_mlp_memory(width, depth, features, batch, arm, resident_samples=samples)
    assert predicted.params == sum(p.numel() for p in model.parameters())
    assert predicted.weights == nbytes(model.parameters())
    assert predicted.gradients == nbytes(p.grad for p in model.parameters())  # FP32 under autocast too
    assert predicted.optimizer == nbytes(v for s in opt.state.values() for k, v in s.items() if k != "step")
    assert predicted.data == nbytes((x, y))


def test_the_peak_bound_is_the_one_the_lab_states():
    from lensa.models.lab_memory import PEAK_SLACK_BYTES, PEAK_TOLERANCE
    from lensa.ui import i18n

    for lang in i18n.LANGUAGES:
        caption = i18n.text(lang, "lab.memory_caption")
        assert f"{PEAK_TOLERANCE:.0%}" in caption and f"{PEAK_SLACK_BYTES / 1e6:.0f} MB" in caption, lang
    assert "estimate" in i18n.text("en", "lab.mem_peak_pred") and "perkiraan" in i18n.text("id", "lab.mem_peak_pred")


@requires_torch
def test_the_gpu_check_sets_the_predicted_peak_against_the_measured_one(monkeypatch, capsys):
    # The GPU check's peak rows, driven on the CPU with a stand-in for max_memory_allocated: the prediction
    # plus the whole slack for cuBLAS workspaces (accepted), 0.9 times it (refused), and no measurement at all
    # (no row, as on a CPU).
    import importlib.util
    from dataclasses import replace
    from pathlib import Path

    from lensa.models.lab_memory import PEAK_SLACK_BYTES

    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    real_compare = gpu_check.live.compare

    def compare(cfg, **kw):
        comp = real_compare(cfg, **kw)
        resident = cfg.train_batches(comp.device) * cfg.batch_size + cfg.eval_size
        peak = {
            a: lab_mlp_memory(cfg.width, cfg.depth, cfg.features, cfg.batch_size, a, resident).peak for a in comp.arms
        }
        fake = {"fp32": peak["fp32"] + PEAK_SLACK_BYTES, "fp16": int(0.9 * peak["fp16"]), "bf16": None}
        return replace(comp, arms={a: replace(r, peak_memory_bytes=fake[a]) for a, r in comp.arms.items()})

    monkeypatch.setattr(gpu_check.live, "compare", compare)
    rc = gpu_check.main(["--device", "cpu", "--small", "--steps", "2", "--skip-bench"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "measured peak (max_memory_allocated)" in line]
    assert [r.split("]")[0] + "] " + r.split("] ")[1].split(":")[0] for r in rows] == ["[ok] fp32", "[FAIL] fp16"]
    assert rc == 1
    table = out[out.index("peak MB accepted") :]
    assert "0.900" in next(line for line in table.splitlines() if line.startswith("fp16"))  # measured/pred
