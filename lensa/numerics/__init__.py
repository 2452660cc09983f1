"""The number-format library: what a float format is and what rounding to it does, value by value and block by block.

:mod:`~lensa.numerics.formats` holds the formats as data (``FORMATS``: each one frozen record of its defining
numbers, everything else derived) and the one rounding path; :mod:`~lensa.numerics.exact` parses and writes one
typed number exactly and :mod:`~lensa.numerics.inspector` is the format inspector's model;
:mod:`~lensa.numerics.blockscale` holds the block-scaling recipes as data (``RECIPES``) and what each stores and
loses, with :mod:`~lensa.numerics.blockscale_dispatch` choosing its numba pass
(:mod:`~lensa.numerics.blockscale_numba`) or numpy's; :mod:`~lensa.numerics.training_recipes` holds training below
16 bits as data (``TRAINING_RECIPES``, the Hadamard rotation), with no torch.

It may import numpy and ml_dtypes only (and its own modules); numba only in ``blockscale_numba``, which
``blockscale_dispatch`` loads lazily where numba is installed. Nothing here imports another part of :mod:`lensa`.
"""
