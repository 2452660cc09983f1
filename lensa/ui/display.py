"""Small display pieces a step draws: a chart with its caption and data table, a row of metric cards."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from lensa.ui import i18n


def chart(fig: object, title: str, caption: str | None = None, alt: str | None = None) -> None:
    """A figure with its heading above it, a caption that decodes it below, and its data as a table.

    ``alt`` is the text alternative a screen reader announces for the chart: a
    sentence built from the same numbers as the page's metrics. Without it the
    figure's own summary (``fig.alt``) is used. The values it plots
    (``fig.table``) follow in a closed section, as a real table.
    """
    st.markdown(f"**{title}**")
    st.plotly_chart(fig, config={"displayModeBar": False}, alt=alt or getattr(fig, "alt", None) or title)
    if caption:
        st.caption(caption)
    table_of(fig)


def table_of(fig: object) -> None:
    """The values a figure plots (``fig.table``), in a closed section, as a real table (nothing without one)."""
    tables_of([("", fig)])


def tables_of(figures: Sequence[tuple[str, object]]) -> None:
    """The values several figures plot, in one closed section: each (title, figure)'s table, under its title in
    bold (none for ""); figures without a table are left out, and with none of them nothing is drawn."""
    tables = [(title, table) for title, fig in figures if (table := getattr(fig, "table", None)) is not None]
    tables = [(title, table) for title, table in tables if table.rows]
    if not tables:
        return
    with st.expander(i18n.text(tables[0][1].lang, "figure.table"), icon=":material/table:"):
        for title, table in tables:
            if title:
                st.markdown(f"**{title}**")
            st.markdown(markdown_table(table.headers, table.rows))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; cells are our own text, with any | escaped."""

    def clean(cell: object) -> str:
        return str(cell).replace("|", "\\|")

    lines = ["| " + " | ".join(clean(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def figure_area() -> DeltaGenerator:
    """An empty place for a step's figures, above the metric cards the page draws next; fill it after them.

    The page then sends a move's new numbers before its figures, so the browser shows them without waiting
    for a changed figure to be drawn again (step 2, same run: p95 from 96 to 64 ms after a key press).
    """
    return st.container()


def metric_row(items: Sequence[tuple[str, str]]) -> None:
    """A row of metric cards: (label, formatted value) pairs."""
    columns = st.columns(len(items), border=True)
    for column, (label, value) in zip(columns, items, strict=True):
        column.metric(label, value)


def secondary_row(count: int) -> list[DeltaGenerator]:
    """A row of ``count`` places under the picture for a step's secondary choices (data source, "also show")."""
    return list(st.columns(count, gap="small", vertical_alignment="bottom"))
