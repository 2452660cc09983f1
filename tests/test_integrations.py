"""The Trainer and Lightning callbacks with the real libraries: tiny models built from a config (no download), the CPU.

What the CPU allows, and so what runs here:

- Lightning refuses ``precision="16-mixed"`` on the CPU (it switches to bf16-mixed), but its own
  ``MixedPrecision("16-mixed", "cpu")`` plugin, passed in ``plugins=``, runs FP16 autocast with a real CPU
  GradScaler: that is Lightning's whole FP16 path, and the recording equals a hand-written loop's, bit for bit.
- Hugging Face's accelerate makes a GradScaler (and FP16 autocast) only on an accelerator: ``fp16=True`` on the
  CPU trains unscaled. The scaler test gives accelerate's ``Accelerator`` the GradScaler and autocast it would
  make on a GPU (``scaler``, ``native_amp``), on the CPU device; everything else is the Trainer's own loop
  (its AcceleratedOptimizer, clipping through ``unscale_``, the default fused AdamW).
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from lensa.runstats import KINDS, load, measured, summarize
from tests.conftest import requires_torch

pytestmark = requires_torch

transformers = pytest.importorskip("transformers")
L = pytest.importorskip("lightning")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
VOCAB, SEQ, BATCH = 61, 8, 4
ROOT = Path(__file__).resolve().parents[1]


def _one_rank_size(library: str, module: str) -> int:
    """Values of ``module``'s output for one rank's micro-batch in tests/distributed_callbacks.py."""
    sizes = {("huggingface", "transformer.wte"): 2 * SEQ * 32, ("lightning", "net.0"): 8 * 16}
    return sizes[library, module]


# --- Hugging Face --------------------------------------------------------------------------------------------


def _gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=VOCAB,
        n_positions=SEQ,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


class _Tokens:
    """Random token sequences (a torch Dataset by duck typing: __len__ and __getitem__)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        import torch

        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def _args(tmp_path, **kw):
    from transformers import TrainingArguments

    base = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        per_device_train_batch_size=BATCH,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    return TrainingArguments(**(base | kw))


def _hand_loop_names(steps: int = 2) -> dict[str, list[str]]:
    """What a Recorder in a hand-written loop records on the same model: kinds and tensor names."""
    import torch

    from lensa.live.capture import Recorder

    model = _gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = _Tokens()
    with Recorder(model, opt, steps=steps, background=False) as rec:
        for step in range(steps):
            batch = {k: torch.stack([data[step * BATCH + i][k] for i in range(BATCH)]) for k in ("input_ids", "labels")}
            opt.zero_grad(set_to_none=True)
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            rec.step(loss=loss)
        run = rec.stats()
    return {k: run.names(k) for k in run.kinds()}


def test_trainer_callback_records_and_saves_what_a_hand_written_loop_records(tmp_path):
    from transformers import Trainer

    from lensa.live.integrations.huggingface import LensaCallback

    callback = LensaCallback()  # the default file: <output_dir>/lensa-run.npz
    trainer = Trainer(model=_gpt2(), args=_args(tmp_path), train_dataset=_Tokens(), callbacks=[callback])
    trainer.train()
    path = tmp_path / "out" / "lensa-run.npz"
    assert callback.path == str(path) and path.exists()
    run = load(path.read_bytes())  # as an upload reads it
    assert run.kinds() == list(KINDS)
    assert {k: run.names(k) for k in run.kinds()} == _hand_loop_names()
    assert run.steps("weight_grad") == [1, 2, 3, 4, 5, 6]  # log-spaced over max_steps=6: every one
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert list(run.losses().values()) == pytest.approx(logged, rel=1e-6)  # the Trainer's own per-step losses
    assert run.meta["trainer"] == "transformers" and run.loss_scales() == {}  # fp32: no scaler
    assert callback.stats() is not None and not trainer.model._forward_hooks  # every hook removed at the end


def _probe(trainer, name: str):
    """A second callback, listed after Lensa's: the scaler's scale at each step, the weights, the true gradients."""
    from transformers import TrainerCallback

    class Probe(TrainerCallback):
        def __init__(self):
            self.scales, self.changed, self.grads = [], [], {}

        def _param(self):
            return dict(trainer.model.named_parameters())[name]

        def on_step_begin(self, args, state, control, **kw):
            self.scales.append(float(trainer.accelerator.scaler.get_scale()))
            self.before = self._param().detach().clone()

        def on_optimizer_step(self, args, state, control, **kw):
            grad = self._param().grad.detach().float().numpy()
            self.grads[state.global_step + 1] = replace(summarize(grad, recipes=True), dtype="float32")

        def on_step_end(self, args, state, control, **kw):
            self.changed.append(not bool((self._param().detach() == self.before).all()))

    return Probe()


def test_trainer_fp16_keeps_true_gradients_the_loss_scale_and_skipped_steps(tmp_path):
    import torch
    from transformers import Trainer

    from lensa.live.integrations.huggingface import LensaCallback

    callback = LensaCallback(tmp_path / "fp16.npz", background=False, recipes=True)
    trainer = Trainer(model=_gpt2(), args=_args(tmp_path, fp16=True), train_dataset=_Tokens(), callbacks=[callback])
    # What accelerate makes for fp16=True on a GPU, here on the CPU: a GradScaler (2**20 overflows FP16 at first,
    # then it halves; growth after each clean step) and FP16 autocast of the model's forward pass.
    trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20, growth_interval=1)
    trainer.accelerator.native_amp = True
    probe = _probe(trainer, "transformer.h.0.mlp.c_fc.weight")
    trainer.add_callback(probe)
    trainer.train()

    run = load(tmp_path / "fp16.npz")
    steps = list(range(1, 7))
    assert list(run.loss_scales().values()) == probe.scales  # the scale each step used
    skipped = [s for s, changed in zip(steps, probe.changed, strict=True) if not changed]
    assert skipped and len(skipped) < len(steps)  # some steps overflowed, some trained
    assert run.skipped_steps() == skipped  # skipped: the weights did not move
    assert run.steps("update") == [s for s in steps if s not in skipped]  # a skipped step has no update
    for step, expected in probe.grads.items():  # the gradients after unscaling, read before zero_grad
        assert run.get("weight_grad", "transformer.h.0.mlp.c_fc.weight", step) == expected
    trained = next(s for s in steps if s not in skipped)
    stats = run.get("weight_grad", "transformer.h.0.mlp.c_fc.weight", trained)
    exps, counts = stats.binade_histogram()
    assert exps[counts > 0].max() < 0  # true gradients of this model are below 1; scaled by >= 2**16 they are not
    assert run.meta["fp16"] is True and measured.scaler_history(run) is not None


# --- Lightning ---------------------------------------------------------------------------------------------


def _lightning_module():
    import torch

    class Regression(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    torch.manual_seed(0)
    return Regression()


def _batches():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, 40 * x.sum(1, keepdim=True)), batch_size=8)


def _fit(module, tmp_path, callback, **kw):
    trainer = L.Trainer(
        max_steps=6,
        accelerator="cpu",
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        **kw,
    )
    trainer.fit(module, _batches())
    return trainer


def _hand_loop(module, scaler=None, dtype=None, accumulate: int = 1):
    """The same training, written out: the Recorder on the same module, AMP's recipe when ``scaler`` is given."""
    import contextlib

    import torch

    from lensa.live.capture import Recorder

    opt = module.configure_optimizers()
    batches = [b for _ in range(2) for b in _batches()]  # two epochs, as the trainer goes on past the first
    with Recorder(module, opt, steps=6, scaler=scaler, background=False) as rec:
        losses = []
        for i, batch in enumerate(batches[: 6 * accumulate]):
            if i % accumulate == 0:
                opt.zero_grad(set_to_none=True)
            ctx = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with ctx:
                loss = module.training_step(batch, i)
            losses.append(loss.detach())
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                scaler.step(opt)
                scaler.update()
            else:
                (loss / accumulate).backward()
                if (i + 1) % accumulate:
                    continue
                opt.step()
            rec.step(loss=sum(losses) / len(losses))
            losses = []
        return rec.stats()


def _same_records(a, b) -> None:
    assert a.kinds() == b.kinds()
    assert {k: a.names(k) for k in a.kinds()} == {k: b.names(k) for k in b.kinds()}
    assert a.items() == b.items()  # every summary, bit for bit
    assert a.loss_scales() == b.loss_scales() and a.skipped_steps() == b.skipped_steps()
    assert list(a.losses().values()) == pytest.approx(list(b.losses().values()), rel=1e-6)


def test_lightning_16_mixed_records_what_a_hand_written_amp_loop_records(tmp_path):
    import torch
    from lightning.pytorch.plugins.precision import MixedPrecision

    from lensa.live.integrations.lightning import LensaCallback

    module = _lightning_module()
    twin = copy.deepcopy(module)
    callback = LensaCallback(tmp_path / "amp.npz", background=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**14, growth_interval=2)  # overflows, then trains
    trainer = _fit(module, tmp_path, callback, plugins=[MixedPrecision("16-mixed", "cpu", scaler)])
    assert trainer.precision == "16-mixed"
    run = load(tmp_path / "amp.npz")
    twin_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**14, growth_interval=2)
    expected = _hand_loop(twin, twin_scaler, torch.float16)
    _same_records(run, expected)
    assert run.skipped_steps() and run.loss_scales()[1] == 2.0**14  # the scaler's history is in the file
    assert math.log2(run.loss_scales()[6]) != 14
    assert run.meta == {"trainer": "lightning", "precision": "16-mixed"}


def test_lightning_without_a_scaler_and_with_accumulation(tmp_path):
    """bf16-mixed calls optimizer.step(closure): the gradients exist only after the step's closure has run."""
    import torch

    from lensa.live.integrations.lightning import LensaCallback

    module = _lightning_module()
    twin = copy.deepcopy(module)
    callback = LensaCallback(background=False)  # the default file: <default_root_dir>/lensa-run.npz
    _fit(module, tmp_path, callback, precision="bf16-mixed")
    run = load(tmp_path / "lensa-run.npz")
    _same_records(run, _hand_loop(twin, dtype=torch.bfloat16))
    assert run.steps("weight_grad") == [1, 2, 3, 4, 5, 6] and run.steps("weight") == [1, 2, 3, 4, 5, 6]

    module = _lightning_module()
    twin = copy.deepcopy(module)
    callback = LensaCallback(tmp_path / "acc.npz", background=False)
    _fit(module, tmp_path, callback, accumulate_grad_batches=2)
    run = load(tmp_path / "acc.npz")
    assert sorted(run.losses()) == [1, 2, 3, 4, 5, 6]  # one Recorder step per optimizer step, not per batch
    expected = _hand_loop(twin, accumulate=2)
    assert {k: run.names(k) for k in run.kinds()} == {k: expected.names(k) for k in expected.kinds()}
    assert run.get("update", "net.0.weight", 6) == expected.get("update", "net.0.weight", 6)


def test_a_lightning_recording_opens_on_step_2(tmp_path):
    from streamlit.testing.v1 import AppTest

    from lensa.live.integrations.lightning import LensaCallback
    from tests.pagetools import APP

    _fit(_lightning_module(), tmp_path, LensaCallback(tmp_path / "run.npz"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/fp16_range.py")
    at.query_params.update({"lang": "en", "data": "upload"})
    at.run()
    at.file_uploader[0].set_value(("run.npz", (tmp_path / "run.npz").read_bytes(), "application/zip")).run()
    assert not at.exception and not at.error
    assert any("net.0.weight" in str(row) for row in at.dataframe[0].value.to_numpy())
    assert len(at.metric) == 4


# --- both ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("library", ["huggingface", "lightning"])
def test_each_callback_takes_the_recorders_options_by_its_names_and_defaults(library):
    import importlib
    import inspect

    from lensa.live.capture import Recorder

    callback = importlib.import_module(f"lensa.live.integrations.{library}").LensaCallback
    params = inspect.signature(callback).parameters
    recorder = inspect.signature(Recorder).parameters
    assert list(params) == ["path", "steps", "kinds", "modules", "meta", "background", "amax", "recipes", "tensorboard"]
    assert params["path"].default is None and params["path"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params["tensorboard"].default is False
    for name in list(params)[1:-1]:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == recorder[name].default, name
    with pytest.raises(RuntimeError, match=r"trainer\.(train|fit)\(\)"):
        callback().stats()


# --- the loss each step: the one the library logs ---------------------------------------------------------------


@pytest.mark.parametrize("accumulation", [1, 4])
def test_the_trainers_loss_is_the_one_it_logs_with_accumulation_too(tmp_path, accumulation):
    """The Trainer normalises a causal LM's loss by the tokens of the whole accumulated batch (num_items_in_batch)
    and logs the sum of its micro-batches' parts: the file holds that, not the micro-batches' mean (a quarter of it
    with 4 micro-batches)."""
    from transformers import Trainer

    from lensa.live.integrations.huggingface import LensaCallback

    callback = LensaCallback(tmp_path / "run.npz", kinds=("weight_grad",), background=False)
    args = _args(tmp_path, max_steps=4, gradient_accumulation_steps=accumulation, per_device_train_batch_size=2)
    trainer = Trainer(model=_gpt2(), args=args, train_dataset=_Tokens(), callbacks=[callback])
    trainer.train()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    run = load(tmp_path / "run.npz")
    assert len(logged) == 4 and list(run.losses().values()) == pytest.approx(logged, rel=1e-6)
    assert min(logged) > 3.5  # ln 61 is 4.1: a loss per token, not divided by the accumulation
    assert "training_step" not in vars(trainer)  # the Trainer's own method again


def _logging_module():
    import torch

    class Logged(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
            self.seen = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.seen.append(float(loss.detach()))
            self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    torch.manual_seed(0)
    return Logged()


def test_lightnings_loss_is_the_mean_of_a_steps_batches_as_it_logs_it(tmp_path):
    """With accumulate_grad_batches=4 Lightning hands the callback each batch's loss divided by 4; the file holds
    the step's mean loss, and the last epoch's logged mean (self.log(on_epoch=True)) is the mean of its steps'."""
    from lensa.live.integrations.lightning import LensaCallback

    module = _logging_module()
    trainer = _fit(module, tmp_path, LensaCallback(tmp_path / "acc.npz", background=False), accumulate_grad_batches=4)
    run = load(tmp_path / "acc.npz")
    by_step = [sum(module.seen[4 * i : 4 * i + 4]) / 4 for i in range(6)]
    assert list(run.losses().values()) == pytest.approx(by_step, rel=1e-6)
    # 8 batches an epoch: steps 1-2, 3-4 and 5-6 are the three epochs; the last one's logged mean is steps 5 and 6's
    assert float(trainer.logged_metrics["loss"]) == pytest.approx((by_step[4] + by_step[5]) / 2, rel=1e-6)


@pytest.mark.parametrize("library", ["huggingface", "lightning"])
def test_on_two_ranks_each_callback_writes_one_file_with_the_loss_the_library_logs(library, tmp_path):
    """Every rank records and hands its part to rank 0, which writes one file: the weights once, each activation
    over both ranks' batches, and each step's loss the mean over the ranks, as the Trainer logs it and as Lightning
    logs ``self.log(..., sync_dist=True)``."""
    from tests.test_capture import torchrun

    ranks = torchrun(ROOT / "tests" / "distributed_callbacks.py", library, str(tmp_path / "run.npz"), timeout=300)
    files = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".npz")
    assert files == ["run.npz"]
    run = load(tmp_path / "run.npz")
    assert run.meta["ranks"] == 2 and run.meta["trainer"] == (
        "transformers" if library == "huggingface" else "lightning"
    )
    first = next(r for r in ranks if r["rank"] == 0)
    if library == "huggingface":
        assert list(run.losses().values()) == pytest.approx(first["logged"], rel=1e-6)
        assert run.names("weight")[0] == "transformer.wte.weight"
    else:
        seen = [r["seen"] for r in sorted(ranks, key=lambda r: r["rank"])]  # 2 batches a step on each rank
        by_step = [sum(s[2 * i] + s[2 * i + 1] for s in seen) / 4 for i in range(6)]
        assert list(run.losses().values()) == pytest.approx(by_step, rel=1e-6)
        assert first["logged"] == pytest.approx((by_step[4] + by_step[5]) / 2, rel=1e-6)  # the last epoch's mean
        assert run.names("weight")[0] == "net.0.weight"
    acts = run.names("activation")[0]
    assert run.get("activation", acts, 1).size == 2 * _one_rank_size(library, acts)


# --- TensorBoard, through the libraries' own loggers ---------------------------------------------------------------


def _scalars(folder) -> dict[str, dict[int, float]]:
    """Every scalar in the TensorBoard event files under ``folder``: tag -> step -> value."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    for events in Path(folder).rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def _expected_scalars(run, steps):
    from lensa.live.integrations import tensorboard_scalars

    return {s: tensorboard_scalars(run, s) for s in steps}


@pytest.mark.parametrize("library", ["huggingface", "lightning"])
def test_tensorboard_gets_the_shares_of_every_recorded_step_and_the_amax_of_every_step(library, tmp_path):
    if library == "huggingface":
        from transformers import Trainer

        from lensa.live.integrations.huggingface import LensaCallback

        callback = LensaCallback(tmp_path / "run.npz", steps=[1, 3, 6], amax=True, tensorboard=True)
        args = _args(tmp_path, report_to=["tensorboard"])
        Trainer(model=_gpt2(), args=args, train_dataset=_Tokens(), callbacks=[callback]).train()
    else:
        from lightning.pytorch.loggers import TensorBoardLogger

        from lensa.live.integrations.lightning import LensaCallback

        callback = LensaCallback(tmp_path / "run.npz", steps=[1, 3, 6], amax=True, tensorboard=True)
        L.Trainer(
            max_steps=6,
            accelerator="cpu",
            callbacks=[callback],
            logger=TensorBoardLogger(str(tmp_path / "tb")),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        ).fit(_lightning_module(), _batches())
    run = load(tmp_path / "run.npz")
    got = _scalars(tmp_path)
    expected = _expected_scalars(run, range(1, 7))
    for step, scalars in expected.items():
        for tag, value in scalars.items():
            assert got[tag][step] == pytest.approx(value, rel=1e-6), (tag, step)
    assert sorted(got["lensa/weight_grad/fp16_zero"]) == [1, 3, 6]  # the last one written before the end
    assert sorted(got["lensa/amax/weight_grad"]) == [1, 2, 3, 4, 5, 6]
    assert "lensa/update/bf16_lost" in got


def test_a_callback_that_fails_inside_stops_recording_and_the_training_goes_on(tmp_path, monkeypatch):
    from transformers import Trainer

    from lensa.live.capture import Recorder, RecorderWarning
    from lensa.live.integrations.huggingface import LensaCallback

    def broken(self, loss=None):
        raise RuntimeError("injected")

    bare = Trainer(model=_gpt2(), args=_args(tmp_path / "bare"), train_dataset=_Tokens())
    bare.train()
    monkeypatch.setattr(Recorder, "_end_step", broken)  # caught inside the Recorder: the losses stop, the rest goes on
    monkeypatch.setattr(Recorder, "save", broken)  # not caught there: the callback catches it
    callback = LensaCallback(tmp_path / "run.npz", background=False)
    trainer = Trainer(model=_gpt2(), args=_args(tmp_path), train_dataset=_Tokens(), callbacks=[callback])
    with pytest.warns(RecorderWarning, match="injected"):
        trainer.train()
    same = [torch_equal(a, b) for a, b in zip(bare.model.parameters(), trainer.model.parameters(), strict=True)]
    assert all(same) and trainer.state.global_step == 6
    assert not trainer.model._forward_hooks and "training_step" not in vars(trainer)


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a.detach(), b.detach())
