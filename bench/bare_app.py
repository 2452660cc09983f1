"""The yardstick: a bare Streamlit app with one slider and one metric, nothing of ours.

The load generator and the browser benchmark run it beside Lensa in the same
run, so every figure of ours is also a ratio to what Streamlit itself costs.
Its slider has the same kind of stops as the lesson's (a select slider over
labels such as ``1.0e-6``), and the metric follows it.
"""

import streamlit as st

STOPS = [f"{m:.1f}e-{e}" for e in range(9, 0, -1) for m in (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)]

value = st.select_slider("Typical gradient size", STOPS, value="1.0e-6")
st.metric("Value", value)
