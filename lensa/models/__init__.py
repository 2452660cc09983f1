"""The steps' models: what each lesson step computes about training, as plain functions of numbers.

:mod:`~lensa.models.memory` counts bytes per parameter (step 1), :mod:`~lensa.models.configs` holds the published
model configurations and presets (``PRESETS``) and :mod:`~lensa.models.estimators` how other tools count;
:mod:`~lensa.models.scaling` is static loss scaling and a dynamic scaler like PyTorch's (step 3),
:mod:`~lensa.models.master` updates accumulated in a format against an FP32 master (step 4),
:mod:`~lensa.models.speed` FLOPs, datasheet peaks and step time (step 6), :mod:`~lensa.models.gradients` the
illustrative gradient sample of steps 2, 3 and 5, and :mod:`~lensa.models.lab_memory` the live lab's model, byte by
byte.

It may import numpy and :mod:`lensa.numerics` only (and its own modules): no torch, no Streamlit, no plotly.
"""
