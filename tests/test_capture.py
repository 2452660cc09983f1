"""lensa.live.capture.Recorder against summaries of tensors computed by hand, and GradScaler's real behaviour."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lensa import runstats as R
from lensa.numerics import blockscale
from tests.conftest import requires_torch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [requires_torch, pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels


def test_import_lensa_live_does_not_import_torch():
    code = "import sys, lensa.live\nassert 'torch' not in sys.modules, 'lensa.live pulled in torch'\nprint('clean')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_log_spaced_steps():
    from lensa.live.capture import log_spaced_steps

    s = log_spaced_steps(300)
    assert s[0] == 1 and s[-1] == 300 and list(s) == sorted(set(s))
    assert 10 <= len(s) <= 13
    assert all(b / a <= 2.0 for a, b in itertools.pairwise(s[1:]))  # spread in log scale
    assert log_spaced_steps(1) == (1,)
    assert log_spaced_steps(3) == (1, 2, 3)
    with pytest.raises(ValueError):
        log_spaced_steps(0)


def _tiny(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x = torch.randn(32, 6)
    y = torch.randint(0, 3, (32,))
    return model, x, y


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _typed(stats: R.TensorStats, dtype: str = "float32") -> R.TensorStats:
    """A record as the Recorder makes it: with the dtype the tensor had (file version 3)."""
    return replace(stats, dtype=dtype)


def test_fp32_summaries_equal_summaries_of_tensors_computed_by_hand():
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    twin, _, _ = _tiny()  # the same weights, trained by hand beside it
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    recorded = {1, 3}
    expected: dict[tuple[str, str, int], R.TensorStats] = {}
    kept: dict[tuple[str, str, int], np.ndarray] = {}  # the full tensors at the recorded steps
    amax: dict[tuple[str, str], list[float]] = {}  # every step's
    losses = {}
    with Recorder(model, opt, steps=recorded, amax=True, recipes=True) as rec:
        for step in range(1, 5):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss=loss)

            # By hand: every intermediate kept with retain_grad().
            twin_opt.zero_grad()
            weights = {n: _np(p).copy() for n, p in twin.named_parameters()}
            h0 = twin[0](x)
            h1 = twin[1](h0)
            h2 = twin[2](h1)
            for h in (h0, h1, h2):
                h.retain_grad()
            twin_loss = torch.nn.functional.cross_entropy(h2, y)
            twin_loss.backward()
            twin_opt.step()
            losses[step] = float(twin_loss.detach())
            tensors = {("weight", n): weights[n] for n in weights}
            tensors |= {("weight_grad", n): _np(p.grad).copy() for n, p in twin.named_parameters()}
            for name, h in zip(("0", "1", "2"), (h0, h1, h2), strict=True):
                tensors["activation", name] = _np(h).copy()
                tensors["activation_grad", name] = _np(h.grad).copy()
            for key, t in tensors.items():
                amax.setdefault(key, []).append(float(np.max(np.abs(t))))
            if step in recorded:
                for (kind, n), t in tensors.items():
                    expected[kind, n, step] = _typed(R.summarize(t, recipes=True))
                    kept[kind, n, step] = t
                for n, p in twin.named_parameters():
                    expected["update", n, step] = _typed(R.summarize_update(weights[n], _np(p), recipes=True))
                    kept["update", n, step] = _np(p) - weights[n]
    run = rec.stats()
    assert run.kinds() == list(R.KINDS)
    assert run.names("weight") == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert run.names("activation") == ["0", "1", "2"]
    assert {k: run.steps(k) for k in run.kinds()} == {k: [1, 3] for k in R.KINDS}
    assert len(run) == len(expected)
    for (kind, name, step), want in expected.items():
        assert run.get(kind, name, step) == want, (kind, name, step)
    assert run.get("update", "0.weight", 3).lost_counts is not None
    # The file's shares and SQNR per block recipe are lensa.numerics.blockscale's on the kept tensors, through a file.
    back = R.load(run.to_bytes())
    assert back.has_recipes
    for (kind, name, step), t in kept.items():
        for key in blockscale.RECIPES:
            assert back.get(kind, name, step).recipe(key) == blockscale.lost(t, key), (kind, name, step, key)
    # amax at every step, recorded or not
    for (kind, name), values in amax.items():
        steps, got = back.amax(kind, name)
        assert steps.tolist() == [1, 2, 3, 4] and got.tolist() == values, (kind, name)
    assert run.losses() == pytest.approx(losses, abs=0)  # the same loss, bit for bit
    assert run.loss_scales() == {} and run.skipped_steps() == []


def test_kinds_modules_and_default_schedule():
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    with Recorder(model, kinds=("activation", "weight_grad"), modules=["1"]) as rec:
        assert rec.recorded_steps is None
        for _ in range(5):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                model(x)  # an evaluation pass: not recorded
            rec.step()
    run = rec.stats()
    assert run.kinds() == ["weight_grad", "activation"]
    assert run.names("activation") == ["1"]
    assert run.steps("activation") == [1, 2, 4]  # powers of two
    assert np.isnan(run.losses()[5])
    with pytest.raises(ValueError, match="optimizer"):
        Recorder(model, kinds=("update",))
    with pytest.raises(ValueError, match="no modules"):
        Recorder(model, kinds=("activation",), modules=["nope"])


def _fp16_step(model, opt, scaler, x, y, spike: float = 1.0):
    import torch

    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    scaler.scale(loss * spike).backward()
    scaler.step(opt)
    scaler.update()
    return loss


def test_gradscaler_true_gradients_scale_history_and_skipped_step():
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    twin, _, _ = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    twin_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    spike_at = 3  # a loss times 1e30 overflows FP16 gradients: the step is skipped and the scale halves
    with Recorder(model, opt, steps=range(1, 6), scaler=scaler, recipes=True) as rec:
        for step in range(1, 6):
            spike = 1e30 if step == spike_at else 1.0
            loss = _fp16_step(model, opt, scaler, x, y, spike)
            rec.step(loss=loss)

            # By hand: the true gradients are the scaled ones divided by the scale.
            twin_opt.zero_grad(set_to_none=True)
            scale = twin_scaler.get_scale()
            with torch.autocast("cpu", dtype=torch.float16):
                h0 = twin[0](x)
                h1 = twin[1](h0)
                h2 = twin[2](h1)
                for h in (h0, h1, h2):
                    h.retain_grad()
                twin_loss = torch.nn.functional.cross_entropy(h2.float(), y)
            twin_scaler.scale(twin_loss * spike).backward()
            grads = {n: _np(p.grad) / np.float32(scale) for n, p in twin.named_parameters()}
            acts = {n: _np(h) for n, h in zip("012", (h0, h1, h2), strict=True)}
            act_grads = {n: _np(h.grad) / np.float32(scale) for n, h in zip("012", (h0, h1, h2), strict=True)}
            twin_scaler.step(twin_opt)
            twin_scaler.update()
            run = rec.stats()
            for n, g in grads.items():
                assert run.get("weight_grad", n, step) == _typed(R.summarize(g, recipes=True)), (n, step)
            for n in "012":  # autocast's outputs, and their gradients, are FP16 tensors: the records say so
                want = _typed(R.summarize(acts[n], recipes=True), "float16")
                assert run.get("activation", n, step) == want, (n, step)
                want = _typed(R.summarize(act_grads[n], recipes=True), "float16")
                assert run.get("activation_grad", n, step) == want, (n, step)

    run = rec.stats()
    # growth_interval=2: two clean steps double the scale; the overflow halves it and resets the count.
    assert run.loss_scales() == {1: 2.0**10, 2: 2.0**10, 3: 2.0**11, 4: 2.0**10, 5: 2.0**10}
    assert run.skipped_steps() == [spike_at]
    overflowed = run.get("weight_grad", "2.weight", spike_at)
    assert overflowed.inf + overflowed.nan > 0  # recorded as it was
    assert run.steps("update") == [1, 2, 4, 5]  # a skipped step changes no weight
    assert run.get("weight_grad", "2.weight", 1).finite_nonzero > 1


def test_skip_detected_from_the_scale_without_the_optimizer():
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    with Recorder(model, steps=[1], scaler=scaler, kinds=("weight_grad",)) as rec:
        for step in range(1, 4):
            rec.step(loss=_fp16_step(model, opt, scaler, x, y, 1e30 if step == 2 else 1.0))
    assert rec.stats().skipped_steps() == [2]
    assert rec.stats().loss_scales() == {1: 2.0**10, 2: 2.0**10, 3: 2.0**9}


def test_fused_optimizer_under_gradscaler_true_gradients_and_its_skipped_step():
    """GradScaler hands its scale to a fused optimizer (grad_scale, found_inf), whose step unscales .grad in place
    and skips inside the kernel: the record still has the true gradients, the skip, and no update then."""
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    twin, _, _ = _tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    spike_at = 2
    with Recorder(model, opt, steps=range(1, 4), scaler=scaler, background=False, recipes=True) as rec:
        for step in range(1, 4):
            opt.zero_grad(set_to_none=True)
            spike = 1e38 if step == spike_at else 1.0  # times 2**12 overflows float32: inf gradients
            loss = torch.nn.functional.cross_entropy(model(x), y) * spike
            before = [p.detach().clone() for p in model.parameters()]
            scaler.scale(loss).backward()  # no unscale_: the fused step unscales
            scaler.step(opt)
            scaler.update()
            rec.step(loss=loss)
            moved = any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
            assert moved == (step != spike_at)
            if step == 1:  # the same weights, FP32, unscaled: a power-of-two scale and back is exact here
                twin.zero_grad()
                torch.nn.functional.cross_entropy(twin(x), y).backward()
                for n, p in twin.named_parameters():
                    assert rec.stats().get("weight_grad", n, 1) == _typed(R.summarize(_np(p.grad), recipes=True)), n
    run = rec.stats()
    assert run.skipped_steps() == [spike_at]
    assert run.steps("update") == [1, 3]
    assert run.get("weight_grad", "2.weight", spike_at).nan + run.get("weight_grad", "2.weight", spike_at).inf > 0


def test_a_step_given_a_closure_records_the_gradients_its_closure_made():
    """optimizer.step(closure), as Lightning calls it: the backward pass runs inside the step."""
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    twin, _, _ = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    with Recorder(model, opt, steps=[1, 2], background=False, recipes=True) as rec:
        for step in (1, 2):
            opt.step(closure)
            rec.step()
            twin_opt.zero_grad()
            torch.nn.functional.cross_entropy(twin(x), y).backward()
            for n, p in twin.named_parameters():
                want = _typed(R.summarize(_np(p.grad), recipes=True))
                assert rec.stats().get("weight_grad", n, step) == want, (n, step)
            twin_opt.step()
    assert rec.stats().steps("update") == [1, 2]


def test_weights_are_read_when_only_a_part_of_the_model_is_called():
    """A LightningModule's training_step calls self.model, never the module the Recorder hooked."""
    import torch

    from lensa.live.capture import Recorder

    inner, x, y = _tiny()
    outer = torch.nn.Module()
    outer.net = inner
    weights = {f"net.{n}": _typed(R.summarize(_np(p), recipes=True)) for n, p in inner.named_parameters()}
    opt = torch.optim.SGD(outer.parameters(), lr=0.1)
    with Recorder(outer, opt, steps=[1], background=False, recipes=True) as rec:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(outer.net(x), y).backward()
        opt.step()
        rec.step()
    assert {n: rec.stats().get("weight", n, 1) for n in weights} == weights


def test_read_gradients_keeps_a_skipped_steps_gradients_from_a_loop_that_clears_them_first():
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    with Recorder(model, opt, steps=[1], scaler=scaler, kinds=("weight_grad",), background=False) as rec:
        loss = torch.nn.functional.cross_entropy(model(x), y) * 1e38
        scaler.scale(loss).backward()
        scaler.step(opt)  # skipped: inf gradients
        rec.read_gradients()
        opt.zero_grad(set_to_none=True)  # as the Trainer does before its step-end event
        scaler.update()
        rec.step(loss=loss)
    run = rec.stats()
    assert run.skipped_steps() == [1] and len(run.names("weight_grad")) == 4


def test_close_removes_every_hook_and_memory_stays_summaries(tmp_path):
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    opt = torch.optim.Adam(model.parameters())

    def hook_count() -> int:
        n = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
        return n + len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks)

    assert hook_count() == 0
    rec = Recorder(model, opt, steps=2)
    assert hook_count() > 0
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        rec.step(loss=1.0)
    rec.close()
    assert hook_count() == 0
    kept = [v for v in vars(rec).values() if isinstance(v, torch.Tensor)]
    assert kept == [] and rec._update is None and rec._shadow is None  # no tensor outlives its step
    rec.save(tmp_path / "run.npz")
    assert R.load(tmp_path / "run.npz") == rec.stats()
    # By default neither the block recipes nor the per-step amax are kept: both cost the training loop time
    # (Recorder's docstring; docs/performance.md), so a run asks for them with recipes=True and amax=True.
    run = rec.stats()
    assert not run.has_recipes
    assert all(run.amax_names(k) == [] for k in R.KINDS)


# --- the torch path: equal to lensa.runstats bit for bit ------------------------------------------------------


def _edge_arrays() -> dict[str, np.ndarray]:
    from tests.test_runstats import edge_arrays, random_bits

    with np.errstate(invalid="ignore"):
        rand = random_bits(200_000, seed=7)
    return {
        **edge_arrays(),
        "random bit patterns": rand,
        "more than one chunk": np.concatenate([rand] * 6),  # 1.2 M values: two bincounts merged
    }


def test_summarize_tensor_equals_summarize_on_edge_arrays():
    import torch

    from lensa.live.capture import summarize_tensor

    for label, x in _edge_arrays().items():
        with np.errstate(invalid="ignore"):
            want = R.summarize(x)
        assert summarize_tensor(torch.from_numpy(x)) == want, label
        assert summarize_tensor(torch.from_numpy(np.stack([x, x], 1))[:, 0]) == want, label  # strided
    x = np.random.default_rng(3).standard_normal(5000).astype(np.float32) * 1e-3
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        t = torch.from_numpy(x).to(dtype)
        assert summarize_tensor(t) == R.summarize(t.float().numpy()), dtype


def test_summarize_update_tensors_equals_summarize_update():
    import torch

    from lensa.live.capture import summarize_update_tensors
    from tests.test_runstats import boundary_values, random_bits

    with np.errstate(invalid="ignore"):
        pairs = [(random_bits(50_000, seed=8), random_bits(50_000, seed=9))]
    b = boundary_values()
    pairs.append((b, b + np.float32(1e-3) * b))  # updates near the rounding points of every format
    pairs.append((b, np.nextafter(b, np.float32(np.inf))))  # one ulp of float32: lost everywhere
    for before, after in pairs:
        with np.errstate(invalid="ignore", over="ignore"):
            want = R.summarize_update(before, after)
        got = summarize_update_tensors(torch.from_numpy(before), torch.from_numpy(after))
        assert got == want and got.lost_counts == want.lost_counts
    with pytest.raises(ValueError, match="shape"):
        summarize_update_tensors(torch.zeros(3), torch.zeros(4))


def test_torch_path_equals_summarize_on_the_reference_models_tensors():
    import torch

    from lensa.live.capture import summarize_tensor, summarize_update_tensors
    from lensa.live.reference import Recipe, setup

    r = Recipe()
    model, opt, data = setup(r)
    outputs: dict[str, torch.Tensor] = {}

    def keep(name):
        def hook(module, args, out):
            out.retain_grad()
            outputs[name] = out

        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if n and not list(m.children())]
    x, y = next(data)
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, r.vocab_size), y.reshape(-1))
    loss.backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    for h in handles:
        h.remove()
    tensors = [p.detach() for p in before.values()] + [p.grad for p in model.parameters()]
    tensors += [o.detach() for o in outputs.values()] + [o.grad for o in outputs.values()]
    assert len(tensors) == 2 * 28 + 2 * 18
    for t in tensors:
        assert summarize_tensor(t) == R.summarize(t.numpy())
    for n, p in model.named_parameters():
        want = R.summarize_update(before[n].numpy(), p.detach().numpy())
        assert summarize_update_tensors(before[n], p) == want, n


def test_unscaling_divides_like_numpy():
    import torch

    from lensa.live.summaries import _unscaled

    x = np.random.default_rng(4).standard_normal(10_000).astype(np.float32) * np.float32(1e-30)
    x = np.concatenate([x, [0.0, np.inf, np.nan, 2.0**-149, 3e38]]).astype(np.float32)
    for scale in (2.0**16, 2.0**-3, 3.0, 1000.0, 2.0**127):
        with np.errstate(over="ignore"):
            want = x / np.float32(scale)
        got = _unscaled(torch.from_numpy(x), scale).numpy()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32), equal_nan=False), scale


def test_from_histograms_refuses_what_does_not_fit():
    n_exact = len(R.exact_fractions())
    ok = dict(size=1, exact_zero=0, inf=0, nan=0, bins=[5], fine_count=[1], fine_low_sum=[0.0])
    assert R.from_histograms(**ok, exact_at=np.zeros((n_exact, R.N_BINADES), int)).finite_nonzero == 1
    bad = [
        dict(ok, exact_at=np.zeros((n_exact, 3), int)),
        dict(ok, bins=[R.N_BINADES * 2048], exact_at=np.zeros((n_exact, R.N_BINADES), int)),
        dict(ok, bins=[5, 5], fine_count=[1, 1], fine_low_sum=[0.0, 0.0], exact_at=np.zeros((n_exact, 277), int)),
        dict(ok, fine_count=[0], exact_at=np.zeros((n_exact, R.N_BINADES), int)),
        dict(ok, fine_count=[1.0], exact_at=np.zeros((n_exact, R.N_BINADES), int)),
        dict(ok, size=2, exact_at=np.zeros((n_exact, R.N_BINADES), int)),
    ]
    for kwargs in bad:
        with pytest.raises(ValueError):
            R.from_histograms(**kwargs)


# --- the summary process: the same records as summarising in the step ------------------------------------------


def _train_recorded(background: bool, steps: int = 4, recorded: list[int] | None = None, amax: bool = False):
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    at = range(1, steps + 1) if recorded is None else recorded
    with Recorder(model, opt, steps=at, scaler=scaler, background=background, amax=amax) as rec:
        for _ in range(steps):
            rec.step(loss=_fp16_step(model, opt, scaler, x, y))
    return rec


@pytest.mark.parametrize("capacity", [None, 4096, 1024])
def test_amax_at_a_recorded_step_is_the_one_the_hooks_take_at_any_other(capacity, monkeypatch):
    """At a recorded step a tensor's amax comes from the copy its summary reads (the summary process's, or the
    summary made in the step), not from the hooks; it must be the number the hooks take where nothing is recorded:
    weights, gradients (unscaled, under a GradScaler), activations and theirs, the ring large, wrapping, or too
    small for an activation (then summarised, and its amax taken, in the hook)."""
    from lensa.live import summaries

    hooks = _train_recorded(background=False, steps=5, recorded=[], amax=True).stats()
    inline = _train_recorded(background=False, steps=5, recorded=[1, 2, 4], amax=True).stats()
    if capacity is not None:
        monkeypatch.setattr(summaries, "DEFAULT_CAPACITY", capacity)
    shipped = _train_recorded(background=True, steps=5, recorded=[1, 2, 4], amax=True).stats()
    for kind in ("weight", "weight_grad", "activation", "activation_grad"):
        names = hooks.amax_names(kind)
        assert names and sorted(names) == sorted(inline.amax_names(kind)) == sorted(shipped.amax_names(kind))
        for name in names:
            steps, want = hooks.amax(kind, name)
            assert steps.tolist() == [1, 2, 3, 4, 5], (kind, name)
            for got in (inline, shipped):
                got_steps, values = got.amax(kind, name)
                assert got_steps.tolist() == steps.tolist() and values.tolist() == want.tolist(), (kind, name)


@pytest.mark.parametrize(
    "capacity",
    [
        None,  # the default ring: everything fits
        4096,  # 4 KiB: the copies wrap around the ring and wait for the process to free room
        2048,  # 2 KiB: an activation fills the whole ring; the weights held for their updates leave room for the rest
        1024,  # smaller than an activation (32 x 16 values): those are summarised in the hook, in order
    ],
)
def test_summary_process_gives_the_records_summarising_in_the_step_gives(capacity, monkeypatch):
    from lensa.live import summaries

    inline = _train_recorded(background=False)
    assert inline._summary_sink.__class__ is summaries.InlineSummaries
    if capacity is not None:
        monkeypatch.setattr(summaries, "DEFAULT_CAPACITY", capacity)
    shipped = _train_recorded(background=True)
    assert shipped._summary_sink.__class__ is summaries.ProcessSummaries
    # 4 steps x (weight, weight_grad, update of 4 parameters; activation, activation_grad of 3 modules)
    assert len(shipped.stats()) == 4 * (3 * 4 + 2 * 3)
    assert shipped.stats() == inline.stats()  # every record, bit for bit, in the same order
    assert shipped._summary_sink._proc.poll() == 0  # close() ended the process


def _in_place_run(background: bool, changes_from: int, steps: int = 4):
    """A small MLP whose first layer's output is halved in place (``h.mul_(0.5)``, outside any module) from step
    ``changes_from`` on, every step recorded; the Recorder and the warnings it gave."""
    import torch

    from lensa.live.capture import Recorder

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(6, 16), torch.nn.Linear(16, 3)
            self.step = 1

        def forward(self, x):
            h = self.fc1(x)
            if self.step >= changes_from:
                h.mul_(0.5)  # after fc1's hook has handed its output over
            return self.fc2(torch.relu(h))

    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        rec = Recorder(model, opt, steps=range(1, steps + 1), background=background)
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss=loss)
            model.step += 1
        run = rec.stats()
        rec.close()
    return rec, run, [str(w.message) for w in told if "lensa" in str(w.message)]


def test_an_output_changed_in_place_after_its_hook_is_recorded_as_the_hook_saw_it():
    """The outputs and their gradients are copied by a thread once a first recorded step has shown they do not
    change in place; one that does (here in every step) is copied in the hook from then on: every record equals the
    one made inside the step, bit for bit, and nothing is left out or warned of."""
    _, inline, _ = _in_place_run(background=False, changes_from=1)
    rec, shipped, told = _in_place_run(background=True, changes_from=1)
    assert ("activation", "fc1") in rec._in_place and ("activation", "fc2") not in rec._in_place
    assert rec._summary_sink._jobs_done > 0  # the others were copied by the thread
    assert shipped == inline and not told


def test_an_output_that_starts_changing_in_place_is_left_out_once_with_a_warning():
    """An output copied by the thread that changed before its copy was checked (here from step 3 on): that record
    is left out, a warning names it, and from the next step it is copied in the hook (recorded again, as inside the
    step); every other record equals the one made inside the step."""
    _, inline, _ = _in_place_run(background=False, changes_from=3)
    _, shipped, told = _in_place_run(background=True, changes_from=3)
    expected = [(label, stats) for label, stats in inline.items() if label != ("activation", "fc1", 3)]
    assert shipped.items() == expected
    assert len(told) == 1 and "'fc1' changed in place during step 3" in told[0], told
    assert ("activation", "fc1", 4) in dict(shipped.items())


def test_summary_process_that_dies_is_reported_not_hung():
    import torch

    from lensa.live.capture import Recorder, RecorderWarning

    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder(model, opt, steps=range(1, 10))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    rec.step(loss=1.0)
    rec._summary_sink._proc.kill()
    rec._summary_sink._proc.wait()
    with pytest.warns(RecorderWarning, match="summary process stopped"):
        rec.stats()
    for _ in range(3):  # training goes on: the losses are still kept, nothing more is summarised
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        rec.step(loss=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the failure was told once
        rec.close()  # closing still removes the hooks and frees the memory
    assert rec._handles == [] and rec.stats().losses() == {1: 1.0, 2: 2.0, 3: 2.0, 4: 2.0}


def test_a_summary_process_that_cannot_start_is_reported_at_once(monkeypatch):
    """The recorder waits for its summary process to say it is ready; one that exits first is an error at the
    start, with the shared memory freed, not a hang at the first step."""
    from lensa.live import summaries

    monkeypatch.setattr(summaries.sys, "executable", "/bin/false")  # a "python" that exits at once
    with pytest.raises(RuntimeError, match="summary process stopped"):
        summaries.ProcessSummaries(R.RunStats(), capacity=4096)


def test_with_recipes_the_summary_process_is_ready_before_the_first_step():
    """Recorder(recipes=True) returns once the summary process has loaded the block-recipe pass (numba's, where it
    is installed): a first recorded step then waits for no room in the ring."""
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder(model, opt, steps=[1], recipes=True)
    assert rec._summary_sink._proc.poll() is None  # running, and past its warm-up (it answered "ready")
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    rec.step(loss=1.0)
    assert rec.waited_seconds == 0.0
    assert rec.stats().has_recipes
    rec.close()


def test_summary_worker_needs_no_torch():
    code = "import sys, lensa.live.summary_worker\nassert 'torch' not in sys.modules\nprint('clean')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_amax_every_step_is_the_largest_magnitude_also_for_nan_negative_and_bfloat16_tensors():
    """The per-step amax, read as max and -min of each tensor in one batch a step: a NaN is kept as inf (the
    file's "no scale holds it"), a tensor whose largest magnitude is negative gives that magnitude, and
    tensors of different dtypes (a BF16 layer's output beside FP32 weights) are read together."""
    import torch

    from lensa.live.capture import Recorder

    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    x = torch.randn(5, 4)
    with torch.no_grad():
        model[0].weight.fill_(0.25)
        model[0].weight[2, 1] = -7.5  # |min| > max
    seen: dict[int, dict[str, float]] = {}
    with Recorder(model, steps=[], amax=True, kinds=("weight", "activation")) as rec:
        for step in (1, 2):
            inp = x.clone()
            if step == 2:
                inp[0, 0] = float("nan")
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step == 1):
                h = model[0](inp)
                out = model[1](h)
            seen[step] = {"0": float(h.detach().float().abs().max()), "1": float(out.detach().float().abs().max())}
            out.float().sum().backward()
            rec.step()
    run = rec.stats()
    assert run.amax("weight", "0.weight")[1].tolist() == [7.5, 7.5]
    for name in ("0", "1"):
        steps, got = run.amax("activation", name)
        assert steps.tolist() == [1, 2]
        assert got[0] == seen[1][name] and seen[1][name] > 0  # the BF16 output's own largest magnitude
        assert got[1] == math.inf  # a NaN propagated through the layer


# --- never in the way: the same training with and without it, whatever fails inside it -------------------------


def _amp_training(recorder_options: dict | None, steps: int = 5, patch=None):
    """FP16 autocast with a GradScaler and AdamW, the Recorder on (``recorder_options``) or not (None): every step's
    loss and the weights at the end, to compare bit for bit."""
    import torch

    from lensa.live.capture import Recorder

    model, x, y = _tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    rec = None if recorder_options is None else Recorder(model, opt, scaler=scaler, **recorder_options)
    losses = []
    for step in range(1, steps + 1):
        loss = _fp16_step(model, opt, scaler, x, y, 1e30 if step == 3 else 1.0)  # step 3 overflows: skipped
        losses.append(float(loss.detach()))
        if rec is not None:
            rec.step(loss=loss)
    if rec is not None:
        rec.close()
    return losses, [p.detach().clone() for p in model.parameters()], rec


def _bit_equal(a, b) -> bool:
    import torch

    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    "options",
    [
        dict(steps=range(1, 6)),
        dict(steps=range(1, 6), background=False, amax=True, recipes=True),
        dict(steps=[2, 5], amax=True),
    ],
)
def test_training_is_bit_for_bit_the_same_with_and_without_the_recorder(options):
    bare_losses, bare_weights, _ = _amp_training(None)
    losses, weights, rec = _amp_training(options)
    assert losses == bare_losses and _bit_equal(weights, bare_weights)
    assert rec.stats().skipped_steps() == [3] and len(rec.stats()) > 0


def _raise(*args, **kwargs):
    raise RuntimeError("injected")


# Where a failure is injected (an attribute patched to raise), and the kinds that must still be recorded after it.
INJECTED = {
    "the model's forward pre-hook": ("Recorder._on_model_forward", {"weight_grad", "activation", "update"}),
    "a module's output hook": ("Recorder._output_hook", {"weight", "weight_grad", "update"}),
    "an output gradient's hook": ("Recorder._grad_hook", {"weight", "weight_grad", "activation", "update"}),
    "the optimizer's pre-hook": ("Recorder._on_optimizer_pre", {"weight", "activation", "activation_grad"}),
    "the optimizer's post-hook": ("Recorder._on_optimizer_post", {"weight", "activation", "activation_grad"}),
    "reading the gradients": ("Recorder._read_grads", {"weight", "activation", "activation_grad", "update"}),
    "holding the weights": ("Recorder._hold_weights", {"weight", "weight_grad", "activation", "activation_grad"}),
    "summarising updates": ("Recorder._summarise_updates", {"weight", "weight_grad", "activation"}),
    "the per-step amax": ("Recorder._flush_amax", set(R.KINDS)),
    "the step's loss": ("Recorder._end_step", set(R.KINDS)),
    "a summary": ("summaries.ProcessSummaries.tensor", {"weight", "weight_grad", "update"}),
    "the summary process's queue": ("summaries.ProcessSummaries.flush", set()),
    "the check of the copies made later": ("summaries.ProcessSummaries.check", set()),
}


@pytest.mark.parametrize("where", list(INJECTED))
def test_a_failure_anywhere_inside_is_told_once_and_training_goes_on_unchanged(where, monkeypatch):
    from lensa.live import capture, summaries
    from lensa.live.capture import RecorderWarning

    target, still = INJECTED[where]
    owner, attr = target.split(".", 1) if target.count(".") == 1 else target.rsplit(".", 1)
    obj = {"Recorder": capture.Recorder, "summaries.ProcessSummaries": summaries.ProcessSummaries}[owner]
    original = getattr(obj, attr)
    if attr in ("_output_hook", "_grad_hook"):  # these make the hook: the hook they make raises

        def making(self, name, original=original):
            original(self, name)
            return _raise

        monkeypatch.setattr(obj, attr, making)
    else:
        monkeypatch.setattr(obj, attr, _raise)
    bare_losses, bare_weights, _ = _amp_training(None)
    with pytest.warns(RecorderWarning, match="injected") as told:
        losses, weights, rec = _amp_training(dict(steps=range(1, 6), amax=True))
    assert losses == bare_losses and _bit_equal(weights, bare_weights)  # the same training, bit for bit
    messages = [str(w.message) for w in told if "injected" in str(w.message)]
    assert messages and len(set(messages)) == len(messages)  # each part that failed told once
    run = rec.stats()
    assert still <= set(run.kinds()), (where, run.kinds())
    assert sorted(run.losses()) == [1, 2, 3, 4, 5] or where == "the step's loss"


def test_nothing_the_recorder_does_at_the_end_raises(tmp_path, monkeypatch):
    """stats(), save() and close() after the summary process died, and save() to a folder that cannot be written:
    warnings, never an exception into the training script."""
    from lensa.live.capture import RecorderWarning
    from lensa.runstats import RunStats

    _, _, rec = _amp_training(dict(steps=range(1, 6)))
    with pytest.warns(RecorderWarning, match="could not be saved"):
        assert rec.save(tmp_path / "no such folder" / "run.npz") is None
    monkeypatch.setattr(RunStats, "to_bytes", _raise)
    with pytest.warns(RecorderWarning, match="injected"):
        assert rec.save(tmp_path / "run.npz") is None
    assert not (tmp_path / "run.npz").exists()


# --- torch.compile: the hooks stay out of the graphs --------------------------------------------------------------


def _compile_run(backend: str | None, record: bool = True, steps: int = 6, fullgraph: bool = False, late: bool = False):
    """The tiny MLP trained ``steps`` steps, compiled with ``backend`` (None: eager), the Recorder on the odd steps
    (attached after the first compiled call with ``late``); (run, weights, unique graphs after steps 2 and last)."""
    import torch
    from torch._dynamo.utils import counters

    from lensa.live.capture import Recorder

    torch._dynamo.reset()
    counters.clear()
    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    forward = model if backend is None else torch.compile(model, backend=backend, fullgraph=fullgraph)
    rec = None
    if record and not late:
        rec = Recorder(forward, opt, steps=range(1, steps + 1, 2))
    graphs = []
    seen: dict[tuple[str, str, int], R.TensorStats] = {}  # without the Recorder: the run's own tensors, by hand
    for step in range(1, steps + 1):
        opt.zero_grad()
        before = {n: _np(p).copy() for n, p in model.named_parameters()}
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        for n, p in model.named_parameters():
            seen["weight", n, step] = _typed(R.summarize(before[n]))
            seen["weight_grad", n, step] = _typed(R.summarize(_np(p.grad)))
        opt.step()
        for n, p in model.named_parameters():
            seen["update", n, step] = _typed(R.summarize_update(before[n], _np(p)))
        if rec is not None:
            rec.step(loss=loss)
        elif record and late:
            rec = Recorder(forward, opt, steps=range(2, steps + 1, 2), kinds=("weight", "activation"))
        graphs.append(counters["stats"]["unique_graphs"])
    if rec is not None:
        rec.close()
    weights = [p.detach().clone() for p in model.parameters()]
    return (seen if rec is None else rec.stats()), weights, graphs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_under_torch_compile_the_records_are_eagers_and_nothing_recompiles(backend):
    """aot_eager computes as eager does, so the whole run is eager's, bit for bit. Inductor's kernels add in
    their own order (this MLP's bias gradients differ from eager's in the last bits from step 1, with or without the
    Recorder): there the first step's weights and activations are eager's, and every weight, gradient and update is
    the compiled run's own, read by hand from a compiled run without the Recorder, which trains to the same weights
    bit for bit."""
    eager, eager_weights, _ = _compile_run(None)
    run, weights, graphs = _compile_run(backend)
    bare, bare_weights, bare_graphs = _compile_run(backend, record=False)
    assert run.kinds() == list(R.KINDS) and run.names("activation") == ["0", "1", "2"]
    assert _bit_equal(weights, bare_weights)  # the Recorder changes nothing of the compiled training
    if backend == "aot_eager":
        assert run == eager and _bit_equal(weights, eager_weights)  # every record, bit for bit
    for label, stats in run.items():
        if label[2] == 1 and label[0] in ("weight", "activation"):
            assert stats == eager.get(*label), label
        if label[0] in ("weight", "weight_grad", "update"):
            assert stats == bare[label], label
    # One graph per hooked module's stretch, made at the first step: recorded and unrecorded steps alternate, and
    # nothing is compiled again (Dynamo's count of graphs does not move).
    assert graphs[0] == graphs[-1] > bare_graphs[-1] == 1, graphs


def test_under_fullgraph_the_model_stays_one_graph_and_the_rest_is_recorded():
    from lensa.live.capture import RecorderWarning

    with pytest.warns(RecorderWarning, match="fullgraph=True"):
        run, weights, graphs = _compile_run("aot_eager", fullgraph=True)
    _, bare_weights, _ = _compile_run("aot_eager", record=False)
    assert _bit_equal(weights, bare_weights) and graphs[-1] == 1
    assert run.kinds() == ["weight_grad", "weight", "update"] and run.steps("weight") == [1, 3, 5]


def test_a_recorder_attached_after_the_first_compiled_call_says_its_hooks_did_not_run():
    from lensa.live.capture import RecorderWarning

    with pytest.warns(RecorderWarning, match="no module hook ran"):
        run, _, _ = _compile_run("aot_eager", late=True)
    assert run.kinds() == ["weight"] and run.steps("weight") == [2, 4]  # read at the optimizer's step instead


# --- several ranks: one file, the same records as one process ----------------------------------------------------


def torchrun(script: Path, *args: str, timeout: int = 180) -> list[dict]:
    """``script`` on two ranks (gloo, CPU) under torchrun; what each rank printed after ``LENSA-JSON``."""
    import json

    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line.split(" ", 1)[1]) for line in out.stdout.splitlines() if line.startswith("LENSA-JSON ")]


@pytest.mark.parametrize("mode", ["fsdp", "ddp"])
def test_two_ranks_record_what_one_process_records_in_one_file(mode, tmp_path):
    """FSDP2 shards every parameter (a DTensor, Shard(0)); DDP wraps the model. Either way the one file rank 0
    writes holds the weights, weight gradients and updates the same model records in one process, bit for bit,
    block recipes included (no block is cut by a shard: the tensors are read whole); each activation and its
    gradient is the two ranks' batches together (both ranks train on the same batch here, so: the one process's
    record twice over); the loss is the ranks' mean; the names carry no ``module.``."""
    from tests.distributed_recording import train

    single = train("single", str(tmp_path / "single.npz"))
    ranks = torchrun(ROOT / "tests" / "distributed_recording.py", mode, str(tmp_path / "two.npz"))
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert [r["wrote"] for r in sorted(ranks, key=lambda r: r["rank"])] == [True, False]  # one writer, one file
    assert all(r["sharded"] == (mode == "fsdp") for r in ranks) and single["wrote"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["single.npz", "two.npz"]
    one, two = R.load(tmp_path / "single.npz"), R.load(tmp_path / "two.npz")
    assert two.meta == {"ranks": 2}
    assert {k: two.names(k) for k in two.kinds()} == {k: one.names(k) for k in one.kinds()}
    assert two.names("weight") == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [label for label, _ in two.items()] == [label for label, _ in one.items()]
    for label, stats in one.items():
        want = R.combine_over_ranks([stats, stats]) if label[0] in R.RANK_KINDS else stats
        assert two.get(*label) == want, label
    assert two.losses() == one.losses()
    for kind in R.KINDS:
        for name in one.amax_names(kind):
            assert two.amax(kind, name)[1].tolist() == one.amax(kind, name)[1].tolist(), (kind, name)


# --- a deep model: the plan fits what a file holds, from the start -----------------------------------------------


def _llama(layers: int = 32):
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def test_a_32_layer_llama_keeps_a_useful_run_with_the_defaults(tmp_path):
    """1,521 records a recorded step (9 parameters and 17 leaf modules a layer): the 12 default steps of a
    100-step run would need 16,731, and a file holds 10,000. The Recorder says so when it is made, keeps 6
    steps (the first and the last among them) with every tensor, and the run trains and saves."""
    import torch

    from lensa.live.capture import Recorder, RecorderWarning, log_spaced_steps

    model = _llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = sum(1 for p in model.parameters() if p.requires_grad)
    leaves = sum(1 for n, m in model.named_modules() if n and not list(m.children()))
    per_step = 3 * params + 2 * leaves
    assert per_step == 1521 and per_step * len(log_spaced_steps(100)) > R.MAX_TENSORS
    with pytest.warns(RecorderWarning, match=r"1,521 records a recorded step.*records 6 of its 11 planned steps"):
        rec = Recorder(model, opt, steps=100, background=False)
    kept = rec.recorded_steps
    assert len(kept) == 6 and kept[0] == 1 and kept[-1] == 100 and set(kept) <= set(log_spaced_steps(100))
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        rec.step(loss=loss)
    assert rec.save(tmp_path / "llama.npz") is not None
    rec.close()
    run = R.load(tmp_path / "llama.npz")
    counts = {k: len(run.names(k)) for k in run.kinds()}  # every tensor of step 1 (2 is not in the plan)
    assert counts == {
        "weight_grad": params,
        "weight": params,
        "update": params,
        "activation": leaves,
        "activation_grad": leaves - 1,
    }  # the rotary embedding's cos and sin need no gradient
    assert run.steps("activation") == [1]
    assert run.meta["recorder"]["steps"] == list(kept) and run.meta["recorder"]["records_per_step"] == per_step


def test_a_plan_that_even_two_steps_overflow_keeps_tensors_spread_through_the_model():
    import torch

    from lensa.live.capture import Recorder, RecorderWarning

    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(2000)])  # 4,000 parameters, 2,000 leaves
    with pytest.warns(RecorderWarning, match="spread through the model"):
        rec = Recorder(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=[1, 5, 9], background=False)
    plan = rec._run.meta["recorder"]
    assert rec.recorded_steps == (1, 9) and plan["records_per_step"] * 2 <= R.MAX_TENSORS
    assert plan["parameters"][1] == 4000 and plan["modules"][1] == 2000
    assert rec._names[0] == "0.weight" and rec._names[-1] == "1999.bias"  # the first and the last kept
    rec.close()
    # Powers of two without end: as many as a file holds (4,000 weights a step: steps 1 and 2), told when the next
    # one is not recorded.
    rec = Recorder(model, steps=None, kinds=("weight",), background=False)
    for step in range(1, 5):
        if step == 3:
            with pytest.warns(RecorderWarning, match="steps from 4 on are not recorded"):
                rec.step()
            continue
        model(torch.ones(1, 2)).sum().backward()
        rec.step()
    rec.close()
    assert rec.stats().steps("weight") == [1, 2] and len(rec.stats()) == 8000


# --- pure BF16: an update lost is judged against the update the optimizer meant to make -------------------------


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize(("lr", "at_least"), [(1e-3, 0.97), (1e-2, 0.7)])
def test_a_pure_bf16_sgd_run_is_told_it_loses_its_updates(lr, at_least, background):
    """``model.to(torch.bfloat16)`` and SGD: after − before is 0 for every update the BF16 weight rounds away. The
    record holds the update SGD meant to make (−lr × grad, worked out in float64), so the share BF16 loses is the
    share of weights that did not move, counted here by hand; an FP32 weight would have kept them all."""
    import torch

    from lensa.live.capture import Recorder
    from lensa.runstats import measured

    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32).to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(64, 32, dtype=torch.bfloat16)
    with Recorder(model, opt, steps=[1], background=background) as rec:
        before = model.weight.detach().clone()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        intended = (-lr * model.weight.grad.double()).float()
        opt.step()
        rec.step(loss=loss)
    unmoved = int((model.weight == before).sum())
    update = rec.stats().get("update", "weight", 1)
    assert update.intended and update.dtype == "bfloat16" and update.nonzero == 1024
    assert update.lost("bf16") == unmoved and measured.lost_share(update, "bf16") >= at_least
    assert update.lost_fp32 == int(((before.float() + intended) == before.float()).sum()) == 0
    assert update == replace(R.summarize_intended(_np(before), intended.numpy()), dtype="bfloat16")
    assert rec.stats().get("weight", "weight", 1).dtype == "bfloat16"


def test_adam_on_bf16_weights_and_a_closure_step_are_judged_against_their_intended_updates():
    """Adam's rule in float64 against BF16 Adam's own arithmetic: the weights that did not move are the ones the
    record says BF16 loses, within a few rounding ties; a step given a closure (Lightning's bf16-true) makes its
    gradients inside the step, and its intended update is worked out after it, from the state held before."""
    import torch

    from lensa.live.capture import Recorder

    for closure in (False, True):
        torch.manual_seed(1)
        model = torch.nn.Linear(32, 32).to(torch.bfloat16)
        opt = torch.optim.Adam(model.parameters(), lr=1e-5)
        x, y = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(64, 32, dtype=torch.bfloat16)

        def loss_fn(opt=opt, model=model, x=x, y=y):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        with Recorder(model, opt, steps=[1, 2], background=False) as rec:
            for step in (1, 2):
                before = model.weight.detach().clone()
                if closure:
                    opt.step(loss_fn)
                else:
                    loss_fn()
                    opt.step()
                rec.step()
                unmoved = int((model.weight == before).sum())
                update = rec.stats().get("update", "weight", step)
                assert update.intended and abs(update.lost("bf16") - unmoved) <= 8, (closure, step, unmoved)
                assert unmoved > 900
