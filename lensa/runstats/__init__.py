"""What a real tensor looks like to each low-precision format, kept small enough to save a whole run.

:func:`summarize` reads any float array as float32 values and keeps, for its finite non-zero values, a table of
counts with one row per binade (power of two, 2**-149 ... 2**127, read from the float32 bits) and one column
per *significand interval*: the stored fraction bits F (0 <= F < 2**23) of each value, cut at the few points
where some format's class changes inside a binade. Beside it: the numbers of exact zeros, infinities and NaNs,
and per format the sum of relative errors. Nothing in it grows with the tensor. From it come exact class
counts, also after scaling (``counts(fmt, scale_exp=k)``), the mean relative error within 2**-11, and for
updates the number each format would lose.

One room per idea, each module's text says the rest:

- :mod:`lensa.runstats.binning`: the class table and the exact binning rules (the grid of fine bins, the
  significand edges, the exact fractions and their bit mask, the packing of counts and low bits, the bins of
  zeros and infinities, the re-binning of float32 subnormals), defined once for the numpy path, the torch path
  (:mod:`lensa.live.torch_binning`) and the measured views (:mod:`lensa.runstats.measured`);
- :mod:`lensa.runstats.record`: the per-tensor record :class:`TensorStats`, made from fine histograms by
  :func:`from_histograms` whoever binned them, its relative error sums and block recipe records, :func:`combine`;
- :mod:`lensa.runstats.counting`: the numpy counting engine, :func:`summarize`, :func:`summarize_update` and
  :func:`summarize_intended`;
- :mod:`lensa.runstats.run`: a run's records, :class:`RunStats`, its ``.npz`` file (:func:`load`), and one run of
  a distributed run's parts (:func:`merge_ranks`, after :func:`check_one_run` says they can be).

Beside them, the recorded-run analysis that the steps and the report read (none of it imported here: import each
module by its name):

- :mod:`lensa.runstats.measured`: what steps 2–5 say about a recorded run (shares, scale bounds, lost updates);
- :mod:`lensa.runstats.reference_run`: the shipped reference run, read without torch;
- :mod:`lensa.runstats.report`: the lesson's verdict on a run file, as data (``python -m lensa report``).

This package imports numpy (and :mod:`lensa.numerics.formats`, :mod:`lensa.numerics.blockscale`) only; the
analysis modules also import :mod:`lensa.models.master` (measured, for step 4's lost updates). No torch.
"""

from __future__ import annotations

from lensa.runstats.binning import (
    BINADE_MAX,
    BINADE_MIN,
    CLASS_KEYS,
    N_BINADES,
    SUMMARY_FORMATS,
    exact_fractions,
    significand_edges,
)
from lensa.runstats.counting import _MIN_PART as _MIN_PART  # tests reach in: the smallest part a thread counts
from lensa.runstats.counting import _WINDOW as _WINDOW  # and the values per packed window
from lensa.runstats.counting import summarize, summarize_intended, summarize_update
from lensa.runstats.record import (
    LOST_FIELDS,
    RECIPE_KEYS,
    TensorStats,
    combine,
    combine_over_ranks,
    from_histograms,
    recipe_records,
)
from lensa.runstats.record import _relative_error_sums as _relative_error_sums  # tests: the sums of given bins
from lensa.runstats.run import _ARRAYS as _ARRAYS  # tests: the arrays of a version-1 file
from lensa.runstats.run import _ARRAYS_V2 as _ARRAYS_V2  # and of a version-2 file
from lensa.runstats.run import (
    FILE_FORMAT,
    FILE_VERSION,
    KINDS,
    MAX_FILE_BYTES,
    MAX_META_CHARS,
    MAX_NAME_CHARS,
    MAX_TENSORS,
    RANK_KINDS,
    READ_VERSIONS,
    NotOneRunError,
    RunStats,
    RunStatsError,
    check_one_run,
    load,
    merge_ranks,
)
from lensa.runstats.run import _unpickle as _unpickle  # what a pickled RunStats names (below)

# A pickled RunStats names the function that reads it back (RunStats.__reduce__) by module: it keeps naming
# lensa.runstats._unpickle, as before this package was split, so pickles load on either side of the split.
_unpickle.__module__ = __name__

__all__ = [
    "BINADE_MAX",
    "BINADE_MIN",
    "CLASS_KEYS",
    "FILE_FORMAT",
    "FILE_VERSION",
    "KINDS",
    "LOST_FIELDS",
    "MAX_FILE_BYTES",
    "MAX_META_CHARS",
    "MAX_NAME_CHARS",
    "MAX_TENSORS",
    "N_BINADES",
    "RANK_KINDS",
    "READ_VERSIONS",
    "RECIPE_KEYS",
    "SUMMARY_FORMATS",
    "NotOneRunError",
    "RunStats",
    "RunStatsError",
    "TensorStats",
    "check_one_run",
    "combine",
    "combine_over_ranks",
    "exact_fractions",
    "from_histograms",
    "load",
    "merge_ranks",
    "recipe_records",
    "significand_edges",
    "summarize",
    "summarize_intended",
    "summarize_update",
]
