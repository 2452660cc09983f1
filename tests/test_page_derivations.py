"""What the format inspector's page and the live lab's page derive, moved out of the pages: the inspector's bit
numbering (checked by rebuilding every code) and the lab's verdicts (checked on hand-made results)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from lensa.live.rows import CLEARLY_FASTER, arm_scale_history, clearly_faster, loss_gap, speedup
from lensa.models.scaling import scale_from_exp
from lensa.numerics import inspector
from lensa.numerics.formats import FORMATS, value_of

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_field_bits_rebuild_every_code(fmt):
    f = FORMATS[fmt]
    for code in range(1 << f.bits):
        value = value_of(code, f)
        if math.isnan(value):
            continue  # every NaN is reported as the format's one quiet NaN
        report = inspector.inspect(repr(value), fmt)
        fields = inspector.field_bits(report)
        numbers = [n for field in fields for n in field.numbers]
        assert numbers == list(range(f.bits - 1, -1, -1))  # all bits, once each, top first
        rebuilt = sum(int(b) << n for field in fields for b, n in zip(field.bits, field.numbers, strict=True))
        assert rebuilt == report.code
        assert [field.name for field in fields] == ["sign", "exponent", "significand"]
        assert [len(field.bits) for field in fields] == [1, f.exponent_bits, f.significand_bits]


def test_flipping_a_fields_set_bits_clears_the_field():
    report = inspector.inspect("0.1", "fp16")
    for field in inspector.field_bits(report):
        cleared = inspector.flip_bits(report, None, field.bit_numbers(field.set_positions))
        again = inspector.field_bits(inspector.inspect(repr(cleared), "fp16"))
        assert next(g for g in again if g.name == field.name).bits == "0" * len(field.bits)


def _comparison(**arms):
    return SimpleNamespace(arms={k: SimpleNamespace(time_s=t, final_loss=loss) for k, (t, loss) in arms.items()})


def test_lab_verdicts():
    c = _comparison(fp32=(12.0, 0.50), bf16=(4.0, 0.52), fp16=(11.0, 0.49))
    assert speedup(c, "bf16") == 3 and clearly_faster(c, "bf16") is True
    assert clearly_faster(c, "fp16") is False  # 12/11 = 1.09: within the noise of a short run
    assert loss_gap(c, "bf16") == pytest.approx(0.02) and loss_gap(c, "fp16") == pytest.approx(-0.01)
    assert loss_gap(c, "fp16", magnitude=True) == pytest.approx(0.01)
    one = _comparison(bf16=(4.0, 0.52))
    assert clearly_faster(one, "bf16") is None and loss_gap(one, "bf16") is None
    just = _comparison(fp32=(CLEARLY_FASTER, 1.0), bf16=(1.0, 1.0))
    assert clearly_faster(just, "bf16") is False  # exactly at the threshold is not clearly faster


def test_arm_scale_history_steps_and_exponents():
    arm = SimpleNamespace(loss_scales=(65536.0, 32768.0, None), skipped=(True, False, False))
    h = arm_scale_history(arm)
    assert h.steps == (1, 2, 3) and h.log2_scales == (16.0, 15.0, 0.0) and h.skipped_steps == (1,)
    assert [scale_from_exp(k) for k in (16, 0, -24)] == [65536.0, 1.0, 2.0**-24]


def test_each_switch_shows_its_bit_and_its_number():
    sign, exponent, significand = inspector.field_bits(inspector.inspect("1", "fp16"))  # 0 01111 0000000000
    assert sign.labels == ("0₁₅",)
    assert exponent.labels == ("0₁₄", "1₁₃", "1₁₂", "1₁₁", "1₁₀")
    assert significand.labels[0] == "0₉" and significand.labels[-1] == "0₀"
