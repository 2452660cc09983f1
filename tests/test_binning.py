"""lensa.runstats.binning, the one place both binning paths read their rules from, checked against independent
computations; and the seams of the split: the pickled name, the summary process's message type, its rings."""

from __future__ import annotations

import io
import marshal
import pickle
from dataclasses import replace

import numpy as np
import pytest

from lensa import runstats as R
from lensa.numerics.formats import classify
from lensa.runstats import binning as B
from tests.conftest import requires_torch

pytestmark = [pytest.mark.torch_kernels, pytest.mark.numpy_kernels]  # rerun by make test-kernels


def test_the_edges_and_exact_fractions_are_what_the_record_says():
    edges = R.significand_edges()
    assert edges == B.significand_edges() and edges[0] == 0 and list(edges) == sorted(set(edges))
    assert B.exact_fractions() == tuple(e - 1 for e in edges if e % 4096)  # the edges one past a fine-bin edge
    mask = B.candidate_mask()
    assert all(f & mask == 0 for f in B.exact_fractions())  # the cheap test lets every exact fraction through
    assert bin(mask).count("1") >= 16  # and not much else: a random F passes it with odds 2**-16 or less


@pytest.mark.parametrize("fmt", R.SUMMARY_FORMATS)
def test_every_cell_is_one_class_at_both_ends_for_any_binade(fmt):
    # lensa.numerics.formats.classify of each cell's smallest and largest value, far past the table's clamped ends
    binades = np.arange(-260, 240)
    edges = np.array(B.significand_edges(), np.float64)
    ends = np.append(edges[1:] - 1, 2**23 - 1)
    got = np.array(B.CELL_CLASSES)[B.cell_classes(fmt, binades)]
    for frac in (edges, ends):
        values = np.ldexp(1.0 + frac[None, :] / 2**23, binades[:, None])  # exact in float64
        assert np.array_equal(got, classify(values, fmt)), fmt


def test_cell_classes_refuse_a_format_the_record_does_not_count():
    with pytest.raises(ValueError, match="run statistics cover"):
        B.cell_classes("fp4_e2m1", np.arange(3))


def test_packing_unpacks_exactly_at_its_limits():
    # numpy path: 2**24 values of the largest finite key, each with low bits 4095, in one int64 total
    window = 1 << 24
    p = B.packing(window)
    assert p == 1 << 36
    key = (0x7F7FFFFF >> 12) << 12
    total = window * (p + key + 4095)
    assert total < 2**63 and divmod(total, p + key) == (window, window * 4095)
    # torch path: 2**20 values in a float64 total, unpacked by floor
    chunk = 1 << 20
    q = float(B.packing(chunk))
    t = np.float64(chunk) * (q + 4095)
    assert t < 2**53 and np.floor(t * (1 / q)) == chunk and t - chunk * q == chunk * 4095
    assert np.float64(chunk) * (q + 4096) >= chunk * q + q  # one more low unit per value would carry: the limit


def test_subnormals_are_binned_by_their_own_binade():
    rng = np.random.default_rng(21)
    mag = rng.integers(1, 2**23, 100_000).astype(np.uint32)
    mag[:3] = [1, 2**22, 2**23 - 1]  # the smallest, a power of two, the largest
    count, low, exact = B.bin_subnormals(mag)
    # independently: the value is mag * 2**-149; frexp gives its binade and significand
    m, e = np.frexp(mag.astype(np.float64))
    binade = e - 1 - 149
    frac = np.round((m * 2 - 1) * 2**23).astype(np.int64)  # exact: at most 23 significant bits
    grid = (binade - B.BINADE_MIN) * 2048 + (frac >> 12)
    assert binade.min() >= -149 and binade.max() <= -127
    assert np.array_equal(count, np.bincount(grid, minlength=23 * 2048))
    assert np.array_equal(low, np.bincount(grid, weights=frac & 4095, minlength=23 * 2048))
    for i, f in enumerate(B.exact_fractions()):
        assert np.array_equal(exact[i], np.bincount(binade[frac == f] + 149, minlength=23))
    assert B.bin_subnormals(mag.view(np.int32))[0].tolist() == count.tolist()  # the torch path's int32 bits


def test_the_edge_bins_count_again_only_when_their_low_bits_say_so():
    never = lambda: pytest.fail("counted again")  # noqa: E731
    assert B.edge_bin_count(7, 0, never) == 7
    assert B.edge_bin_count(7, 3.0, lambda: 5) == 5


def test_a_pickled_run_names_the_module_path_it_had_before_the_split():
    run = R.RunStats({"arm": "fp16"})
    run.add("weight", "w", 1, R.summarize(np.arange(10, dtype=np.float32)))
    data = pickle.dumps(run)
    assert b"lensa.runstats" in data and b"lensa.runstats.run" not in data
    assert pickle.loads(data) == run
    assert R._unpickle.__module__ == "lensa.runstats" and R.load(io.BytesIO(run.to_bytes())) == run


def test_the_worker_items_are_named_and_cross_the_pipe_as_plain_tuples():
    from lensa.live.summary_worker import Item, read_message, write_message

    item = Item(3, "update", "update", "fc.weight", 2, 128, 6, [2, 3], 4096, after_offset=256)
    with pytest.raises(ValueError):
        marshal.dumps(item)  # marshal takes no tuple subclass: the parent sends tuple(item)
    buf = io.BytesIO()
    write_message(buf, {"op": "items", "items": [tuple(item)]})
    buf.seek(0)
    message = read_message(buf)
    assert message is not None
    (back,) = map(Item.of, message["items"])
    assert back == item and back.after_offset == 256 and back.scale is None and back.release == 4096


@requires_torch
def test_a_tensor_larger_than_the_ring_keeps_its_recipe_records():
    import torch

    from lensa.live.summaries import InlineSummaries, ProcessSummaries

    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(2))
    runs = []
    for sink in (InlineSummaries, ProcessSummaries):
        run = R.RunStats()
        s = sink(run, recipes=True) if sink is InlineSummaries else sink(run, capacity=4096, recipes=True)
        s.tensor("activation", "big", 1, x)  # 12 KiB: larger than the 4 KiB ring, summarised in the hook
        s.tensor("activation", "small", 1, x[:4])  # this one goes through the ring and the process
        s.close()
        runs.append(run)
    inline, process = runs
    assert process == inline and process.has_recipes
    assert process.get("activation", "big", 1) == replace(R.summarize(x.numpy(), recipes=True), dtype="float32")
