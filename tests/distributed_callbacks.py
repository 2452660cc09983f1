"""The Trainer and Lightning callbacks on two ranks (gloo, CPU): run by tests/test_integrations.py under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed_callbacks.py LIBRARY OUT

LIBRARY: ``huggingface`` or ``lightning``. Both accumulate 2 batches a step; each rank trains on its own batches.
Rank 0 prints, as JSON, the losses the library logged for comparison with the file every rank saved to OUT.
"""

from __future__ import annotations

import json
import os
import sys


def huggingface(out: str) -> dict:
    from transformers import Trainer, TrainingArguments

    from lensa.live.integrations.huggingface import LensaCallback
    from tests.test_integrations import _gpt2, _Tokens

    args = TrainingArguments(
        output_dir=os.path.join(os.path.dirname(out), "hf"),
        max_steps=4,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = Trainer(model=_gpt2(), args=args, train_dataset=_Tokens(), callbacks=[LensaCallback(out)])
    trainer.train()
    return {"logged": [h["loss"] for h in trainer.state.log_history if "loss" in h], "rank": args.process_index}


def lightning(out: str) -> dict:
    import lightning as L

    from lensa.live.integrations.lightning import LensaCallback
    from tests.test_integrations import _batches, _logging_module

    module = _logging_module()
    trainer = L.Trainer(
        max_steps=6,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        accumulate_grad_batches=2,
        callbacks=[LensaCallback(out)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=os.path.dirname(out),
    )
    trainer.fit(module, _batches())
    return {"logged": float(trainer.logged_metrics["loss"]), "seen": module.seen, "rank": trainer.global_rank}


if __name__ == "__main__":
    print("LENSA-JSON", json.dumps({"huggingface": huggingface, "lightning": lightning}[sys.argv[1]](sys.argv[2])))
