"""Each lesson step as one pure function: a control state in, everything the step shows out.

A step's view holds the numbers its cards show, the data its figures draw and the values its sentences use,
as frozen dataclasses computed from the core (numpy and :mod:`lensa`'s own modules only: no Streamlit, no
plotly, no torch). The page renders a view and writes its prose; the browser scrubs through the views of a
slider's stops, which the server computes once per state of the other controls and shares with every visitor
(:mod:`lensa.ui.components.scrub`). So what the browser shows at a stop is what the server computes for it.

One module per step, named after the page: :mod:`~lensa.lessons.memory` (step 1),
:mod:`~lensa.lessons.fp16_range` (2), :mod:`~lensa.lessons.loss_scaling` (3),
:mod:`~lensa.lessons.master_weights` (4), :mod:`~lensa.lessons.bf16` (5), :mod:`~lensa.lessons.speed` (6),
:mod:`~lensa.lessons.blocks` (block scaling) and :mod:`~lensa.lessons.low_bits` (training below 16 bits: stochastic
rounding, the rotation and the shipped comparison of the recipes, read from ``lensa/data``);
:mod:`~lensa.lessons.common` holds what several share.
"""
