"""Lensa · Mixed Precision: the home page."""

import streamlit as st

st.set_page_config(page_title="Lensa · Mixed Precision", page_icon="🔎")
st.title("Lensa · Mixed Precision")
