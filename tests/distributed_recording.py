"""A training run on two ranks (or one process), recorded: run by tests/test_capture.py and tests/test_integrations.py.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed_recording.py MODE OUT

MODE: ``fsdp`` (FSDP2's ``fully_shard`` on each Linear and the model: sharded DTensor parameters), ``ddp``
(DistributedDataParallel), ``single`` (no process group: the same model trained in one process). Every rank trains
on the same batch, so the all-reduced gradients equal the one process's exactly ((g + g) / 2 = g) and the runs can
be compared bit for bit. Each rank calls ``Recorder.save(OUT)`` with the same path: rank 0 writes it.
"""

from __future__ import annotations

import json
import os
import sys


def model_and_batch():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return model, torch.randn(8, 16), torch.randint(0, 4, (8,))


def train(mode: str, out: str) -> dict:
    import torch
    import torch.distributed as dist

    from lensa.live.capture import Recorder

    if mode != "single":
        dist.init_process_group("gloo")
    model, x, y = model_and_batch()
    wrapped = model
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model[0])
        fully_shard(model[2])
        fully_shard(model)
    elif mode == "ddp":
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    rec = Recorder(wrapped, opt, steps=[1, 2, 4], amax=True, recipes=True, background=mode != "ddp")
    for _ in range(4):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(wrapped(x), y)
        loss.backward()
        opt.step()
        rec.step(loss=loss)
    written = rec.save(out)
    rec.close()
    rank = dist.get_rank() if mode != "single" else 0
    sharded = type(next(iter(model.parameters()))).__name__ == "DTensor"
    if mode != "single":
        dist.destroy_process_group()
    return {"rank": rank, "wrote": written is not None, "sharded": sharded}


if __name__ == "__main__":
    print("LENSA-JSON", json.dumps(train(sys.argv[1], sys.argv[2])), flush=True)
    # Done and reported: leave without the interpreter's teardown, where DDP's Reducer destroys its gloo process
    # group while holding the GIL and joins a gloo thread that waits for the GIL (seen once: a rank hung there,
    # after its work, until torchrun's 180 s timeout; Recorder(background=False), so no thread of lensa's ran).
    os._exit(0)
