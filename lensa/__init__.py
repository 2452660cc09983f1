"""Lensa's numeric core: float formats, gradients, memory, loss scaling, master weights, speed.

Only numpy and ml_dtypes are needed here. The view layer (``lensa.ui``) and the
live PyTorch runs (``lensa.live``) are imported on their own, never from here.
"""
