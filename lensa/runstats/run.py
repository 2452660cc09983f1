"""A run's statistics (:class:`RunStats`): many tensor records, labelled, with per-step scalars; saved and loaded.

A run keeps one :class:`~lensa.runstats.record.TensorStats` per (kind, name, step) and, per step, the loss,
the loss scale and whether the step was skipped. Amax at every step (version 2): a run may also keep, per
(kind, name), the largest magnitude of the tensor at every step (float32, NaN where not read): what a
delayed-scaling recipe's history holds (see :func:`lensa.numerics.blockscale.replay_delayed`).

It is saved as a ``.npz`` file read with ``allow_pickle=False``: int64 counts, float64 sums, labels as JSON
text, a version number, and every count checked on load (:func:`load`). Version 3 adds each tensor's dtype and,
for an intended update, the FP32 lost count (:mod:`lensa.runstats.record`). Version-1 and version-2 files
still load: :attr:`RunStats.version` says which one a run came from; :attr:`TensorStats.recipes` is None for a
version-1 file's tensors, :attr:`TensorStats.dtype` None for both. :meth:`RunStats.save` writes atomically (a
file beside the target, then renamed over it), so a reader never sees half a file.

:func:`merge_ranks` makes one run of the parts that the ranks of a distributed run recorded (what
``Recorder.save`` and ``lensa merge`` write); :func:`check_one_run` says whether files can be such parts (``lensa
merge`` asks it first: a file keeps no rank number or run id, so it reads what the ranks of one run share).

This module imports numpy (and the rest of :mod:`lensa.runstats`) only.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from lensa.runstats.binning import SUMMARY_FORMATS, significand_edges
from lensa.runstats.record import LOST_FIELDS, RECIPE_KEYS, TensorStats

KINDS: tuple[str, ...] = ("weight_grad", "activation_grad", "activation", "weight", "update")

FILE_FORMAT = "lensa-runstats"
FILE_VERSION = 3  # 2: block recipes per tensor (recipe_lost), amax at every step; 3: dtypes, intended updates
READ_VERSIONS = (1, 2, 3)
# The kinds each rank of a data-parallel run holds its own part of (its batch's): combined over ranks. The others
# (weights, their gradients and updates) are the same tensor on every rank once gathered: kept once.
RANK_KINDS: tuple[str, ...] = ("activation_grad", "activation")
MAX_FILE_BYTES = 25 * 1024 * 1024
MAX_TENSORS = 10_000
MAX_NAME_CHARS = 200
MAX_META_CHARS = 65_536


class RunStatsError(ValueError):
    """A run statistics file that cannot be used; the message says why and what to do."""


_Label = tuple[str, str, int]
_SCALAR_FIELDS = ("size", "exact_zero", "inf", "nan")


def _check_label(kind: str, name: str, step: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"a tensor name must be a string of 1 to {MAX_NAME_CHARS} characters, not {name!r:.80}")
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 1:
        raise ValueError(f"steps count from 1; got {step!r}")


class RunStats:
    """The statistics of one training run (one arm): tensors labelled (kind, name, step), and per-step scalars.

    ``kind`` is one of :data:`KINDS`; ``name`` is PyTorch's own (``named_parameters`` / ``named_modules``);
    steps count from 1. Per step it also keeps the loss and, for FP16 arms, the loss scale and whether the
    step was skipped (its gradients overflowed). ``meta`` holds a few JSON values (the arm, the recipe).
    """

    def __init__(self, meta: Mapping[str, Any] | None = None) -> None:
        self._meta: dict[str, Any] = dict(meta or {})
        text = json.dumps(self._meta, allow_nan=False)  # raises for anything JSON cannot hold
        if len(text) > MAX_META_CHARS:
            raise ValueError(f"meta is {len(text):,} characters of JSON; at most {MAX_META_CHARS:,}")
        self._tensors: dict[_Label, TensorStats] = {}
        self._steps: dict[int, tuple[float, float | None, bool]] = {}
        self._amax: dict[tuple[str, str], dict[int, float]] = {}
        self.version = FILE_VERSION  # the file version it was read from (a run built here: the current one)

    # building

    def add(self, kind: str, name: str, step: int, stats: TensorStats) -> None:
        """Keep ``stats`` under (kind, name, step); a label is used once, and a run holds at most 10,000 tensors."""
        _check_label(kind, name, step)
        if not isinstance(stats, TensorStats):
            raise TypeError(f"need a TensorStats, not {type(stats).__name__}")
        label = (kind, name, int(step))
        if label in self._tensors:
            raise ValueError(f"{kind} {name!r} at step {step} is already recorded")
        if len(self._tensors) >= MAX_TENSORS:
            raise ValueError(f"a run holds at most {MAX_TENSORS:,} tensors")
        self._tensors[label] = stats

    def record_step(self, step: int, loss: float, loss_scale: float | None = None, skipped: bool = False) -> None:
        """Keep one step's loss (any float, inf and NaN included), loss scale (> 0, FP16 arms) and skip flag."""
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 1:
            raise ValueError(f"steps count from 1; got {step!r}")
        if loss_scale is not None and not (math.isfinite(loss_scale) and loss_scale > 0):
            raise ValueError(f"a loss scale is a finite number > 0, not {loss_scale!r}")
        self._steps[int(step)] = (float(loss), None if loss_scale is None else float(loss_scale), bool(skipped))

    def record_amax(self, kind: str, name: str, step: int, amax: float) -> None:
        """Keep the largest magnitude of tensor (kind, name) at ``step`` (any step, recorded or not).

        Kept as float32 (a float32 tensor's amax is one); a tensor holding a NaN is kept as inf (no scale
        holds it), so that NaN in a file means "not read at that step".
        """
        self.record_amaxes(step, [(kind, name)], [amax])

    def record_amaxes(self, step: int, labels: Sequence[tuple[str, str]], amaxes: Sequence[float]) -> None:
        """:meth:`record_amax` for several tensors of one step at once (the Recorder's every step): each label is
        checked the first time it is seen, and the values are converted together."""
        if len(labels) != len(amaxes):
            raise ValueError(f"{len(labels)} labels but {len(amaxes)} amax values")
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 1:
            raise ValueError(f"steps count from 1; got {step!r}")
        with np.errstate(over="ignore"):  # past float32's range is inf, as np.float32(x) gives
            values = np.asarray(amaxes, np.float64).astype(np.float32)
        values[np.isnan(values)] = np.inf
        if (values < 0).any():
            bad = next(a for a, v in zip(amaxes, values.tolist(), strict=True) if v < 0)
            raise ValueError(f"an amax is a magnitude (>= 0), not {bad!r}")
        for label, value in zip(labels, values.tolist(), strict=True):
            series = self._amax.get(label)
            if series is None:
                _check_label(label[0], label[1], step)
                if len(self._amax) >= MAX_TENSORS:
                    raise ValueError(f"a run keeps amax for at most {MAX_TENSORS:,} tensors")
                series = self._amax[label] = {}
            series[int(step)] = value

    def amax_names(self, kind: str) -> list[str]:
        """The tensor names of ``kind`` with an amax series, in the order they were first kept."""
        return [n for k, n in self._amax if k == kind]

    def amax(self, kind: str, name: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(steps, amax) of tensor (kind, name), ascending steps; empty arrays if none was kept."""
        series = self._amax.get((kind, name), {})
        steps = np.array(sorted(series), np.int64)
        return steps, np.array([series[int(t)] for t in steps], np.float64)

    @property
    def has_recipes(self) -> bool:
        """Whether every tensor's record keeps what each block recipe loses (False for a version-1 file)."""
        return bool(self._tensors) and all(s.recipes is not None for s in self._tensors.values())

    # querying

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = json.loads(json.dumps(self._meta))
        return meta

    def __len__(self) -> int:
        return len(self._tensors)

    def get(self, kind: str, name: str, step: int) -> TensorStats:
        """The statistics recorded under (kind, name, step); KeyError if there are none."""
        try:
            return self._tensors[(kind, name, int(step))]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"no {kind} {name!r} at step {step} in this run") from None

    def items(self) -> list[tuple[tuple[str, str, int], TensorStats]]:
        """Every ((kind, name, step), statistics) pair, in the order they were added (a file keeps that order)."""
        return list(self._tensors.items())

    def kinds(self) -> list[str]:
        """The kinds recorded, in the order of :data:`KINDS`."""
        present = {k for k, _, _ in self._tensors}
        return [k for k in KINDS if k in present]

    def names(self, kind: str) -> list[str]:
        """The tensor names recorded for ``kind``, in the order they were first added (the model's order)."""
        return list(dict.fromkeys(n for k, n, _ in self._tensors if k == kind))

    def steps(self, kind: str) -> list[int]:
        """The steps at which ``kind`` was recorded, ascending."""
        return sorted({s for k, _, s in self._tensors if k == kind})

    def losses(self) -> dict[int, float]:
        """Loss per recorded step, by step."""
        return {s: v[0] for s, v in sorted(self._steps.items())}

    def loss_scales(self) -> dict[int, float]:
        """Loss scale per step, for the steps that have one (FP16 arms)."""
        return {s: v[1] for s, v in sorted(self._steps.items()) if v[1] is not None}

    def skipped_steps(self) -> list[int]:
        """The steps whose optimizer step was skipped, ascending."""
        return [s for s, v in sorted(self._steps.items()) if v[2]]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunStats):
            return NotImplemented
        same_steps = self._steps.keys() == other._steps.keys() and all(
            np.array_equal(np.array(self._steps[s][:2], float), np.array(other._steps[s][:2], float), equal_nan=True)
            and self._steps[s][2] == other._steps[s][2]
            for s in self._steps
        )
        same_amax = self._amax.keys() == other._amax.keys() and all(
            self._amax[k].keys() == other._amax[k].keys()
            and np.array_equal(list(self._amax[k].values()), list(other._amax[k].values()), equal_nan=True)
            for k in self._amax
        )
        return (
            self._meta == other._meta
            and list(self._tensors.items()) == list(other._tensors.items())
            and same_steps
            and same_amax
        )

    # saving and loading

    def to_bytes(self) -> bytes:
        """The ``.npz`` file's bytes (see :meth:`save`)."""
        labels = list(self._tensors)
        stats = list(self._tensors.values())
        names = list(dict.fromkeys([*(n for _, n, _ in labels), *(n for _, n in self._amax)]))
        name_index = {n: i for i, n in enumerate(names)}
        dtypes = list(dict.fromkeys(s.dtype for s in stats if s.dtype is not None))
        dtype_index = {d: i for i, d in enumerate(dtypes)}
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "formats": list(SUMMARY_FORMATS),
            "significand_edges": list(significand_edges()),
            "kinds": list(KINDS),
            "recipes": list(RECIPE_KEYS),
            "names": names,
            "dtypes": dtypes,
            "meta": self._meta,
        }
        n_cols = len(significand_edges())
        steps = sorted(self._steps)
        arrays: dict[str, NDArray[Any]] = {
            "header": np.array(json.dumps(header, allow_nan=False)),
            "tensor_kind": np.array([KINDS.index(k) for k, _, _ in labels], np.int64),
            "tensor_name": np.array([name_index[n] for _, n, _ in labels], np.int64),
            "tensor_step": np.array([s for _, _, s in labels], np.int64),
            "tensor_counts": np.array([[getattr(s, f) for f in _SCALAR_FIELDS] for s in stats], np.int64).reshape(
                -1, len(_SCALAR_FIELDS)
            ),
            "tensor_binade_lo": np.array([s.binade_lo for s in stats], np.int64),
            "tensor_rows": np.array([s.table.shape[0] for s in stats], np.int64),
            "table": np.concatenate([s.table for s in stats]) if stats else np.zeros((0, n_cols), np.int64),
            "rel_error_sum": np.array([s.rel_error_sum for s in stats], np.float64).reshape(-1, len(SUMMARY_FORMATS)),
            "has_lost": np.array([s.lost_counts is not None for s in stats], np.bool_),
            "lost": np.array([s.lost_counts or (0,) * len(SUMMARY_FORMATS) for s in stats], np.int64).reshape(
                -1, len(SUMMARY_FORMATS)
            ),
            "step": np.array(steps, np.int64),
            "step_loss": np.array([self._steps[s][0] for s in steps], np.float64),
            "step_loss_scale": np.array(
                [math.nan if self._steps[s][1] is None else self._steps[s][1] for s in steps], np.float64
            ),
            "step_skipped": np.array([self._steps[s][2] for s in steps], np.bool_),
            "has_recipes": np.array([s.recipes is not None for s in stats], np.bool_),
            "recipe_lost": np.array(
                [s.recipes or ((0.0,) * len(LOST_FIELDS),) * len(RECIPE_KEYS) for s in stats], np.float64
            ).reshape(-1, len(RECIPE_KEYS), len(LOST_FIELDS)),
            **self._amax_arrays(name_index),
            "tensor_dtype": np.array([-1 if s.dtype is None else dtype_index[s.dtype] for s in stats], np.int64),
            "lost_fp32": np.array([-1 if s.lost_fp32 is None else s.lost_fp32 for s in stats], np.int64),
        }
        buf = io.BytesIO()
        # allow_pickle=True is numpy's default; naming it tells the type checker no array takes that name.
        np.savez_compressed(buf, allow_pickle=True, **arrays)
        data = buf.getvalue()
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"the file would be {len(data):,} bytes; load() reads at most {MAX_FILE_BYTES:,}")
        return data

    def _amax_arrays(self, name_index: dict[str, int]) -> dict[str, NDArray[Any]]:
        series = list(self._amax)
        amax_steps = sorted({t for v in self._amax.values() for t in v})
        col = {t: i for i, t in enumerate(amax_steps)}
        values = np.full((len(series), len(amax_steps)), np.nan, np.float32)
        for i, key in enumerate(series):
            for t, v in self._amax[key].items():
                values[i, col[t]] = v
        return {
            "amax_kind": np.array([KINDS.index(k) for k, _ in series], np.int64),
            "amax_name": np.array([name_index[n] for _, n in series], np.int64),
            "amax_step": np.array(amax_steps, np.int64),
            "amax": values,
        }

    def __reduce__(self) -> tuple[Any, tuple[bytes, int]]:
        """Pickled as its file (compressed, checked again when unpickled): a run's records are many small arrays."""
        return (_unpickle, (self.to_bytes(), self.version))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the run to ``path`` as a versioned ``.npz`` (no pickles: int64 counts, float64 sums, JSON labels).

        Atomically: the bytes go to a new file beside ``path``, which is then renamed over it, so a reader (or a
        second writer) never sees a file half written.
        """
        data = self.to_bytes()
        target = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(target))
        fd, temp = tempfile.mkstemp(prefix=".lensa-", suffix=".npz.part", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    @classmethod
    def load(cls, source: str | os.PathLike[str] | bytes | IO[bytes]) -> RunStats:
        """Read a file written by :meth:`save` (see :func:`load`)."""
        return load(source)


_ARRAYS: dict[str, tuple[str, int]] = {  # name: (dtype kind and size, number of dimensions)
    "header": ("U", 0),
    "tensor_kind": ("i8", 1),
    "tensor_name": ("i8", 1),
    "tensor_step": ("i8", 1),
    "tensor_counts": ("i8", 2),
    "tensor_binade_lo": ("i8", 1),
    "tensor_rows": ("i8", 1),
    "table": ("i8", 2),
    "rel_error_sum": ("f8", 2),
    "has_lost": ("b1", 1),
    "lost": ("i8", 2),
    "step": ("i8", 1),
    "step_loss": ("f8", 1),
    "step_loss_scale": ("f8", 1),
    "step_skipped": ("b1", 1),
}
_ARRAYS_V2: dict[str, tuple[str, int]] = {
    **_ARRAYS,
    "has_recipes": ("b1", 1),
    "recipe_lost": ("f8", 3),
    "amax_kind": ("i8", 1),
    "amax_name": ("i8", 1),
    "amax_step": ("i8", 1),
    "amax": ("f4", 2),
}
_ARRAYS_V3: dict[str, tuple[str, int]] = {
    **_ARRAYS_V2,
    "tensor_dtype": ("i8", 1),
    "lost_fp32": ("i8", 1),
}
_VERSION_ARRAYS = {1: _ARRAYS, 2: _ARRAYS_V2, 3: _ARRAYS_V3}
# A valid file at the limits unpacks to about 200 MB (10,000 tensors of 277 rows); refuse to unpack more.
_MAX_UNPACKED_BYTES = 256 * 1024 * 1024


def _unpickle(data: bytes, version: int) -> RunStats:
    run = load(data)
    run.version = version
    if version == 1:  # pickled as the current version: its records still came from a version-1 file
        run._tensors = {k: s if s.has_recipes else replace(s, origin="version_1") for k, s in run._tensors.items()}
    return run


def _read_source(source: str | os.PathLike[str] | bytes | IO[bytes]) -> bytes:
    too_big = f"the file is over {MAX_FILE_BYTES // (1024 * 1024)} MB; run statistics files are smaller: record fewer"
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    elif isinstance(source, str | os.PathLike):
        try:
            if os.path.getsize(source) > MAX_FILE_BYTES:
                raise RunStatsError(too_big + " tensors or steps")
            with open(source, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise RunStatsError(f"cannot read {os.fspath(source)!r}: {e.strerror or e}") from None
    elif hasattr(source, "read"):
        data = source.read(MAX_FILE_BYTES + 1)
        if not isinstance(data, bytes | bytearray):
            raise RunStatsError("the file object must be opened in binary mode ('rb')")
        data = bytes(data)
    else:
        raise RunStatsError(f"cannot read run statistics from a {type(source).__name__}; give a path, bytes or a file")
    if len(data) > MAX_FILE_BYTES:
        raise RunStatsError(too_big + " tensors or steps")
    return data


def load(source: str | os.PathLike[str] | bytes | IO[bytes]) -> RunStats:
    """Read run statistics saved by :meth:`RunStats.save` from a path, bytes or a binary file object.

    Everything is checked; anything unusable raises :class:`RunStatsError` (a ValueError) saying what is
    wrong: not a ``.npz``, truncated or damaged, object or pickled arrays, a wrong or missing version,
    negative or non-integer counts, totals that disagree, more than 10,000 tensors, names over 200
    characters, a file over 25 MB.
    """
    data = _read_source(source)
    try:
        return _load_bytes(data)
    except RunStatsError:
        raise
    except Exception as e:  # a damaged file can fail deep inside zipfile, zlib or numpy: report, never crash
        raise RunStatsError(
            f"the file is damaged or is not a Lensa run statistics file ({type(e).__name__}: {e})"
        ) from e


def _load_bytes(data: bytes) -> RunStats:
    if not data.startswith(b"PK"):
        raise RunStatsError("this is not a .npz (zip) file; save run statistics with RunStats.save()")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except zipfile.BadZipFile as e:
        raise RunStatsError(f"the .npz file is truncated or damaged ({e}); save it again") from None
    members = {i.filename.removesuffix(".npy") for i in infos}
    # an older file has fewer arrays: the newest version whose arrays are all there
    expected = next(a for v, a in sorted(_VERSION_ARRAYS.items(), reverse=True) if set(a) <= members or v == 1)
    missing = sorted(set(expected) - members)
    if "header" in missing:
        raise RunStatsError("the file has no header, so no version: it was not written by RunStats.save()")
    if missing or len(infos) != len(expected):
        extra = sorted(members - set(expected))
        raise RunStatsError(f"the file's arrays do not match this version (missing {missing}, unexpected {extra})")
    if sum(i.file_size for i in infos) > _MAX_UNPACKED_BYTES:
        raise RunStatsError("the file unpacks to more than a valid run statistics file can hold")

    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {}
        for name, (dtype, ndim) in expected.items():
            try:
                a = npz[name]
            except ValueError as e:
                if "pickle" in str(e) or "Object arrays" in str(e):
                    raise RunStatsError(
                        f"array {name!r} holds Python objects (a pickle); Lensa never reads those"
                    ) from e
                raise
            ok = a.dtype.kind == "U" if dtype == "U" else a.dtype.str.lstrip("<>=|") == dtype
            if not ok:
                what = "counts must be integers (int64)" if dtype == "i8" else f"expected {dtype}"
                raise RunStatsError(f"array {name!r} has type {a.dtype}: {what}")
            if a.ndim != ndim:
                raise RunStatsError(f"array {name!r} has {a.ndim} dimensions, expected {ndim}")
            arrays[name] = a
    return _from_arrays(arrays)


def _from_arrays(a: dict[str, NDArray[Any]]) -> RunStats:
    version, names, meta, dtypes = _read_header(a)
    _check_shapes(a, version)
    _check_counts_and_indices(a, names)
    meta_text = json.dumps(meta)
    if len(meta_text) > MAX_META_CHARS:
        raise RunStatsError(f"meta is {len(meta_text):,} characters of JSON; at most {MAX_META_CHARS:,}")
    run = RunStats(meta)
    run.version = version
    _load_tensors(run, a, names, version, dtypes)
    _load_steps(run, a)
    if version >= 2:
        _load_amax(run, a, names)
    return run


def _read_header(a: dict[str, NDArray[Any]]) -> tuple[int, list[str], dict[str, Any], list[str]]:
    """The file's version, tensor names, meta and dtype names, once its header says it counts what this Lensa
    counts."""
    try:
        header = json.loads(str(a["header"][()]))
    except json.JSONDecodeError as e:
        raise RunStatsError(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
        raise RunStatsError("the header does not name the Lensa run statistics format")
    version = header.get("version")
    if version is None:
        raise RunStatsError("the header has no version; save the run again with this Lensa")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise RunStatsError(f"file version {version!r}; this Lensa reads versions 1, 2 and 3: save it again")
    arrays_version = 3 if "tensor_dtype" in a else 2 if "recipe_lost" in a else 1
    if version != arrays_version:
        raise RunStatsError(f"the file says version {version} but holds the arrays of another version")
    if version >= 2 and header.get("recipes") != list(RECIPE_KEYS):
        raise RunStatsError("the file records other block recipes than this Lensa")
    if header.get("formats") != list(SUMMARY_FORMATS) or header.get("significand_edges") != list(significand_edges()):
        raise RunStatsError("the file counts other formats or significand intervals than this Lensa")
    if header.get("kinds") != list(KINDS):
        raise RunStatsError("the file uses other tensor kinds than this Lensa")
    names, meta = header.get("names"), header.get("meta")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RunStatsError("the header's tensor names are not a list of strings")
    long = [n for n in names if not 1 <= len(n) <= MAX_NAME_CHARS]
    if long:
        raise RunStatsError(f"tensor name {long[0][:40]!r}… has {len(long[0])} characters; at most {MAX_NAME_CHARS}")
    if not isinstance(meta, dict):
        raise RunStatsError("the header's meta is not a JSON object")
    dtypes = header.get("dtypes", []) if version >= 3 else []
    if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
        raise RunStatsError("the header's dtypes are not a list of strings")
    return int(version), names, meta, dtypes


def _check_shapes(a: dict[str, NDArray[Any]], version: int) -> None:
    """Raise RunStatsError unless every array has the shape the number of tensors and steps asks for."""
    n = a["tensor_kind"].shape[0]
    if n > MAX_TENSORS:
        raise RunStatsError(f"the file holds {n:,} tensors; at most {MAX_TENSORS:,}: record fewer steps or layers")
    n_cols, n_fmt = len(significand_edges()), len(SUMMARY_FORMATS)
    shapes = {
        "tensor_name": (n,),
        "tensor_step": (n,),
        "tensor_counts": (n, len(_SCALAR_FIELDS)),
        "tensor_binade_lo": (n,),
        "tensor_rows": (n,),
        "rel_error_sum": (n, n_fmt),
        "has_lost": (n,),
        "lost": (n, n_fmt),
    }
    if version >= 3:
        shapes["tensor_dtype"] = (n,)
        shapes["lost_fp32"] = (n,)
    if version >= 2:
        shapes["has_recipes"] = (n,)
        shapes["recipe_lost"] = (n, len(RECIPE_KEYS), len(LOST_FIELDS))
        k = a["amax_kind"].shape[0]
        shapes["amax_name"] = (k,)
        shapes["amax"] = (k, a["amax_step"].shape[0])
    for key, shape in shapes.items():
        if a[key].shape != shape:
            raise RunStatsError(f"array {key!r} has shape {a[key].shape}, expected {shape}")
    if a["table"].shape[1] != n_cols:
        raise RunStatsError(f"the table has {a['table'].shape[1]} columns, expected {n_cols}")
    m = a["step"].shape[0]
    for key in ("step_loss", "step_loss_scale", "step_skipped"):
        if a[key].shape != (m,):
            raise RunStatsError(f"array {key!r} has shape {a[key].shape}, expected {(m,)}")


def _check_counts_and_indices(a: dict[str, NDArray[Any]], names: list[str]) -> None:
    """Raise RunStatsError for negative counts, table rows that do not add up, kinds or names out of range."""
    for key in ("tensor_counts", "table", "lost", "tensor_rows"):
        if a[key].size and a[key].min() < 0:
            raise RunStatsError(f"array {key!r} holds negative counts")
    rows = a["tensor_rows"]
    if int(rows.sum()) != a["table"].shape[0]:
        raise RunStatsError(f"the tensors claim {int(rows.sum())} table rows but the table has {a['table'].shape[0]}")
    n = a["tensor_kind"].shape[0]
    if n and (a["tensor_kind"].min() < 0 or a["tensor_kind"].max() >= len(KINDS)):
        raise RunStatsError("a tensor's kind is out of range")
    if n and (a["tensor_name"].min() < 0 or a["tensor_name"].max() >= len(names)):
        raise RunStatsError("a tensor's name index is out of range")


def _load_tensors(run: RunStats, a: dict[str, NDArray[Any]], names: list[str], version: int, dtypes: list[str]) -> None:
    """Add every tensor record of the (checked) arrays to ``run``, each checked again by TensorStats."""
    offsets = np.concatenate([[0], np.cumsum(a["tensor_rows"])])
    n = a["tensor_kind"].shape[0]
    dtype_of = a["tensor_dtype"].tolist() if version >= 3 else [-1] * n
    lost_fp32 = a["lost_fp32"].tolist() if version >= 3 else [-1] * n
    if any(not -1 <= d < len(dtypes) for d in dtype_of):
        raise RunStatsError("a tensor's dtype index is out of range")
    for i in range(a["tensor_kind"].shape[0]):
        label = (KINDS[int(a["tensor_kind"][i])], names[int(a["tensor_name"][i])], int(a["tensor_step"][i]))
        size, exact_zero, inf, nan = (int(v) for v in a["tensor_counts"][i])
        try:
            stats = TensorStats(
                size=size,
                exact_zero=exact_zero,
                inf=inf,
                nan=nan,
                binade_lo=int(a["tensor_binade_lo"][i]),
                table=a["table"][offsets[i] : offsets[i + 1]],
                rel_error_sum=tuple(float(v) for v in a["rel_error_sum"][i]),
                lost_counts=tuple(int(v) for v in a["lost"][i]) if a["has_lost"][i] else None,
                recipes=tuple(map(tuple, a["recipe_lost"][i].tolist()))
                if version >= 2 and a["has_recipes"][i]
                else None,
                origin="version_1" if version == 1 else "summary",
                dtype=dtypes[dtype_of[i]] if dtype_of[i] >= 0 else None,
                lost_fp32=lost_fp32[i] if lost_fp32[i] >= 0 else None,
            )
            run.add(*label, stats)
        except ValueError as e:
            raise RunStatsError(f"{label[0]} {label[1]!r} at step {label[2]}: {e}") from None


def _load_steps(run: RunStats, a: dict[str, NDArray[Any]]) -> None:
    for step, loss, scale, skipped in zip(
        a["step"].tolist(),
        a["step_loss"].tolist(),
        a["step_loss_scale"].tolist(),
        a["step_skipped"].tolist(),
        strict=True,
    ):
        try:
            run.record_step(step, loss, None if math.isnan(scale) else scale, skipped)
        except ValueError as e:
            raise RunStatsError(f"step {step}: {e}") from None
    if len(run._steps) != a["step"].shape[0]:
        raise RunStatsError("a step is recorded twice")


def _load_amax(run: RunStats, a: dict[str, NDArray[Any]], names: list[str]) -> None:
    kinds, idx, steps, values = a["amax_kind"], a["amax_name"], a["amax_step"], a["amax"]
    if kinds.size and (kinds.min() < 0 or kinds.max() >= len(KINDS)):
        raise RunStatsError("an amax series' kind is out of range")
    if idx.size and (idx.min() < 0 or idx.max() >= len(names)):
        raise RunStatsError("an amax series' name index is out of range")
    if steps.size and (steps.min() < 1 or np.any(np.diff(steps) <= 0)):
        raise RunStatsError("the amax steps must count from 1 and ascend")
    if len(set(zip(kinds.tolist(), idx.tolist(), strict=True))) != kinds.size:
        raise RunStatsError("an amax series is recorded twice")
    if values.size and np.nanmin(values, initial=0.0) < 0:
        raise RunStatsError("an amax is negative")
    step_list = steps.tolist()
    for i in range(kinds.size):
        kind, name = KINDS[int(kinds[i])], names[int(idx[i])]
        row = values[i]
        for t, v in zip(step_list, row.tolist(), strict=True):
            if not math.isnan(v):
                run.record_amax(kind, name, t, v)


def merge_ranks(parts: Sequence[RunStats]) -> RunStats:
    """One run of the parts the ranks of one distributed run recorded, rank 0's first (``lensa merge``).

    Each rank's own part of a tensor (:data:`RANK_KINDS`: activations and their gradients, from each rank's batch)
    is combined over the ranks (:func:`lensa.runstats.record.combine_over_ranks`: counts and sums add); the
    tensors every rank holds the same of (weights, weight gradients, updates) are kept once, from the first part
    that has them. Per step: the loss is the mean over the parts that have the step (what a data-parallel run
    optimises, and what the Trainer logs), the loss scale the first part's, and a step is skipped when any part
    skipped it. An amax series is the largest over the parts (each rank's shard of a sharded weight, each rank's
    batch of an activation; a tensor every rank holds whole gives the same number on each). The meta is the first
    part's, with ``"ranks"``: the number of parts. ValueError when there is no part. Nothing else is checked here
    (the Recorder merges the parts it gathered itself): :func:`check_one_run` checks files from elsewhere.
    """
    from lensa.runstats.record import combine_over_ranks

    if not parts:
        raise ValueError("merging needs at least one run")
    meta = {**parts[0].meta, "ranks": len(parts)}
    out = RunStats(meta)
    labels = list(dict.fromkeys(label for part in parts for label in part._tensors))
    for label in labels:
        held = [part._tensors[label] for part in parts if label in part._tensors]
        if label[0] in RANK_KINDS and len(held) > 1:
            out.add(*label, combine_over_ranks(held))
        else:
            out.add(*label, held[0])
    for step in sorted({s for part in parts for s in part._steps}):
        rows = [part._steps[step] for part in parts if step in part._steps]
        loss = math.fsum(r[0] for r in rows) / len(rows)
        out.record_step(step, loss, rows[0][1], any(r[2] for r in rows))
    for key in dict.fromkeys(k for part in parts for k in part._amax):
        series = [part._amax[key] for part in parts if key in part._amax]
        for step in sorted({t for s in series for t in s}):
            values = [s[step] for s in series if step in s]
            out.record_amax(key[0], key[1], step, max(values))
    return out


class NotOneRunError(ValueError):
    """Files that cannot be the per-rank parts of one run (:func:`check_one_run`). ``reason`` says which check
    failed (``"ranks"``, ``"too_many"``, ``"steps"``, ``"recorded"``, ``"arm"``, ``"shared_missing"``,
    ``"shared_size"``, ``"shared_values"``, ``"dtype"`` or ``"same_records"``), ``parts`` the indices of the parts
    that disagree (the first one or two) and ``values`` the rest of what the sentence saying so needs."""

    def __init__(self, reason: str, message: str, parts: Sequence[int], **values: Any) -> None:
        super().__init__(message)
        self.reason = reason
        self.parts = tuple(parts)
        self.values = values


def _first_missing(mine: set[int], theirs: set[int]) -> int | None:
    return min(mine - theirs, default=None)


def check_one_run(parts: Sequence[RunStats]) -> None:
    """Raise :class:`NotOneRunError` unless ``parts`` can be the parts the ranks of one distributed run recorded
    (what ``lensa merge`` combines; :func:`merge_ranks` itself checks nothing).

    A file keeps no rank number and no run id, so the checks read what the ranks of one run share, as
    :class:`lensa.live.capture.Recorder` records them on each rank:

    - the number of ranks (the meta's ``"ranks"``, which the Recorder writes on every rank of a run of several):
      the same in every part that has it, no part without it beside one with it (a file without it was recorded
      in one process, a whole run), and no more parts than ranks;
    - the training steps: every rank records every step's loss (its own batch's: losses differ between ranks and
      are not compared), so the steps with a loss are the same in every part that has any;
    - the recorded steps: every rank records tensors at the same steps (rank 0 its weights and its own activations,
      the others their activations), so every part that holds a tensor holds tensors at the same steps;
    - the arm (the meta's ``"arm"``), where two parts both name one;
    - every tensor's type (one Recorder names it on every rank): the same in every part that holds the tensor;
    - the tensors every rank holds the same of (weights, their gradients, updates: rank 0 alone records them, so
      normally one part has them): where several parts hold them, the same tensors at the same steps, each with the
      same number of values and counts (each rank's own tensors, activations and their gradients, may differ in
      their number of values, since each rank's batch is its own, and in their names, since a module a rank's
      batch never ran, an unused expert, has no record there);
    - no two parts with the same records (a tensor at least): a rank records its own batch, so two equal parts
      are one rank's file twice, whose activations would be counted twice.
    """
    n = len(parts)
    ranks = [p._meta.get("ranks") for p in parts]
    counted = [i for i, r in enumerate(ranks) if r is not None]
    if counted:
        i = counted[0]
        for j in range(n):
            if ranks[j] != ranks[i]:  # j > i where it has a number of ranks: i is the first part that has one
                raise NotOneRunError(
                    "ranks",
                    f"part {i} was recorded on {ranks[i]} ranks and part {j} "
                    + ("in one process" if ranks[j] is None else f"on {ranks[j]}"),
                    (i, j),
                    ranks_a=ranks[i],
                    ranks_b=ranks[j],
                )
        world = ranks[i]
        if isinstance(world, int) and not isinstance(world, bool) and n > world:
            raise NotOneRunError("too_many", f"{n} parts of a run of {world} ranks", (), n=n, ranks=world)

    stepped = [(i, set(p._steps)) for i, p in enumerate(parts) if p._steps]
    recorded = [(i, {s for _, _, s in p._tensors}) for i, p in enumerate(parts) if p._tensors]
    for reason, sets, what in (("steps", stepped, "trained"), ("recorded", recorded, "recorded tensors at")):
        for (i, mine), (j, theirs) in itertools.pairwise(sets):
            for a, b, have, lack in ((i, j, mine, theirs), (j, i, theirs, mine)):
                step = _first_missing(have, lack)
                if step is not None:
                    raise NotOneRunError(reason, f"part {a} {what} step {step} and part {b} did not", (a, b), step=step)

    arms = [(i, p._meta["arm"]) for i, p in enumerate(parts) if "arm" in p._meta]
    for (i, arm_a), (j, arm_b) in itertools.pairwise(arms):
        if arm_a != arm_b:
            raise NotOneRunError(
                "arm", f"part {i} is of the arm {arm_a!r} and part {j} of {arm_b!r}", (i, j), arm_a=arm_a, arm_b=arm_b
            )

    typed: dict[_Label, tuple[int, str | None]] = {}
    for i, p in enumerate(parts):
        for label, s in p._tensors.items():
            k, dtype = typed.setdefault(label, (i, s.dtype))
            if dtype != s.dtype:
                kind, name, step = label
                raise NotOneRunError(
                    "dtype",
                    f"part {k} holds {kind} {name!r} at step {step} in {dtype}, part {i} in {s.dtype}",
                    (k, i),
                    kind=kind,
                    name=name,
                    step=step,
                    dtype_a=dtype,
                    dtype_b=s.dtype,
                )

    held = [{label: s for label, s in p._tensors.items() if label[0] not in RANK_KINDS} for p in parts]
    shared = [(i, records) for i, records in enumerate(held) if records]
    for (i, first), (j, second) in itertools.pairwise(shared):
        for a, b, hold, miss in ((i, j, first, second), (j, i, second, first)):
            missing = next((label for label in hold if label not in miss), None)
            if missing is not None:
                kind, name, step = missing
                raise NotOneRunError(
                    "shared_missing",
                    f"parts {i} and {j} both hold weights, their gradients or updates, which every rank holds the same "
                    f"of, but only part {a} holds {kind} {name!r} at step {step}",
                    (a, b),
                    kind=kind,
                    name=name,
                    step=step,
                )
        for (kind, name, step), x in first.items():
            y = second[(kind, name, step)]
            if x.size != y.size:
                raise NotOneRunError(
                    "shared_size",
                    f"part {i} holds {kind} {name!r} at step {step} as {x.size:,} values, part {j} as {y.size:,}",
                    (i, j),
                    kind=kind,
                    name=name,
                    step=step,
                    size_a=x.size,
                    size_b=y.size,
                )
            same = (x.exact_zero, x.inf, x.nan, x.binade_lo) == (y.exact_zero, y.inf, y.nan, y.binade_lo)
            if not (same and np.array_equal(x.table, y.table)):
                raise NotOneRunError(
                    "shared_values",
                    f"parts {i} and {j} hold different values of {kind} {name!r} at step {step}, a tensor every rank "
                    "holds the same of",
                    (i, j),
                    kind=kind,
                    name=name,
                    step=step,
                )

    for j, q in enumerate(parts):
        for i in range(j):
            p = parts[i]
            if p._tensors and p._steps.keys() == q._steps.keys() and p == q:
                raise NotOneRunError("same_records", f"parts {i} and {j} hold the same records", (i, j))
