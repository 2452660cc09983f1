"""A training run on two ranks (or one process), recorded: run by tests/test_capture.py and tests/test_merge.py.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed_recording.py MODE OUT [PARTS]

MODE: ``fsdp`` (FSDP2's ``fully_shard`` on each Linear and the model: sharded DTensor parameters), ``ddp``
(DistributedDataParallel), ``single`` (no process group: the same model trained in one process). Every rank trains
on the same batch, so the all-reduced gradients equal the one process's exactly ((g + g) / 2 = g) and the runs can
be compared bit for bit. Each rank calls ``Recorder.save(OUT)`` with the same path: rank 0 writes it.

With PARTS (a folder), each rank trains on a batch of its own, as real ranks do, and also saves its own part of the
run (``Recorder.stats()``) there as ``rank<N>.npz``: the per-rank files ``lensa merge`` combines.
"""

from __future__ import annotations

import json
import os
import sys

# What a distributed run trained with, kept alive until the process leaves (see the end of train).
_ALIVE: list[object] = []


def model_and_batch(rank: int | None = None):
    """The model and its batch: the same batch on every rank, or (``rank`` given) that rank's own."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    batch = None if rank is None else torch.Generator().manual_seed(100 + rank)
    return model, torch.randn(8, 16, generator=batch), torch.randint(0, 4, (8,), generator=batch)


def train(mode: str, out: str, parts: str | None = None) -> dict:
    import torch
    import torch.distributed as dist

    from lensa.live.capture import Recorder

    if mode != "single":
        dist.init_process_group("gloo")
    rank = dist.get_rank() if mode != "single" else 0
    model, x, y = model_and_batch(rank if parts is not None else None)
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
    if parts is not None:
        rec.stats().save(os.path.join(parts, f"rank{rank}.npz"))
    written = rec.save(out)
    rec.close()
    sharded = type(next(iter(model.parameters()))).__name__ == "DTensor"
    if mode != "single":
        # No teardown on the ranks: both wait here until every collective is done, then report and leave with
        # os._exit, the model, its wrapper and the process group still alive. Teardown hung a DDP rank twice in
        # CI, each time after its work, until torchrun's 180 s timeout: once in the interpreter's exit (freeing
        # DDP's Reducer frees its gloo process group, whose destructor joins a gloo thread waiting for the GIL the
        # destructor holds), once between saving and reporting (rank 0 had written and reported; rank 1 never
        # reported: destroy_process_group, or the Reducer freed as train() returned). Recorder(background=False)
        # for DDP, so no thread of lensa's ran.
        dist.barrier()
        _ALIVE.extend([wrapped, model, opt, rec])
    return {"rank": rank, "wrote": written is not None, "sharded": sharded}


if __name__ == "__main__":
    report = json.dumps(train(*sys.argv[1:4]))
    # One write, under PIPE_BUF, so the two ranks' lines (printed together, after the barrier) never interleave.
    os.write(1, f"LENSA-JSON {report}\n".encode())
    os._exit(0)  # done and reported: no teardown (train says why)
