"""The browser side of a lesson step: components drawn with Streamlit's components v2.

:mod:`lensa.ui.components.scrub` is a step's sliders, its charts and its metric cards in one component: dragging a
slider (or pressing its arrow keys) redraws the charts and the cards in the browser from the views of every stop,
computed on the server once and sent with the page; the server hears the value once per gesture. Its JavaScript,
CSS and Plotly.js are package assets in ``assets/`` (served by Streamlit, never from a CDN).
"""
