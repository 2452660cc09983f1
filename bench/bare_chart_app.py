"""The yardstick of the lesson's loop: a bare Streamlit app with one slider, one chart and one metric.

``bench.scrub`` measures it beside Lensa in the same run. Its slider has the same kind of stops as step 2's
(a select slider over labels such as ``1.0e-6``); the chart and the metric follow the slider when Streamlit
sends its value, on release, as a plain Streamlit app does.
"""

import math

import plotly.graph_objects as go
import streamlit as st

STOPS = [f"{m:.1f}e-{e}" for e in range(9, 0, -1) for m in (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)]

value = st.select_slider("Typical gradient size", STOPS, value="1.0e-6")
centre = math.log10(float(value))
xs = [centre + (i - 20) / 8 for i in range(41)]
ys = [round(60 * math.exp(-(((x - centre) / 1.0) ** 2) / 2)) for x in xs]
st.plotly_chart(go.Figure(go.Bar(x=xs, y=ys)), config={"displayModeBar": False})
st.metric("Value", value)
