"""Read a chart the way a reader does, from the plotly JSON the browser gets, and its data table from the
Markdown the page writes under it; say where the table does not hold a number the chart draws.

Nothing here calls the code that built the chart: the positions are decoded from what the chart itself says
about its axes (tick labels such as ``1e-8`` or ``2^4`` under integer ticks make a log axis, a title
``log2 S`` a log2 axis, labelled ticks over row indices a category axis), and the table's cells are parsed
back from the text a reader sees (``1.3 s``, ``0.12%``, ``2^16``, ``1,0e-6`` in Indonesian). A drawn number
matches a cell when it is within half a unit of the cell's last shown digit ("display rounding"); the
exact spellings (hover values to 17 digits, counts) must be equal.

:func:`check` returns a list of problems, empty when the table holds every number the chart draws and every
row of the table is drawn. A chart of a shape it cannot read is itself a problem: teach this module to read
it rather than leave it unchecked.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Spec = dict[str, Any]
RANGE_MARK = " … "
MINUS = "−"
_SCI = re.compile(r"^(-?[0-9][0-9.,]*)(?:e([-+]?\d+))?(?:\s*(%|s|GB|×))?$")
_POWER = re.compile(r"^2\^(-?\d+)$")


# --- the table ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def parse_markdown_table(text: str) -> Table:
    """The header and rows of a Markdown table (``|`` inside a cell escaped as ``\\|``)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]

    def cells(line: str) -> tuple[str, ...]:
        inner = line.removeprefix("|")
        inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
        return tuple(p.strip().replace("\\|", "|") for p in re.split(r"(?<!\\)\|", inner))

    if len(lines) < 2 or not set(lines[1]) <= set("|- :"):
        raise ValueError(f"not a Markdown table: {text[:80]!r}")
    return Table(cells(lines[0]), tuple(cells(line) for line in lines[2:]))


# --- numbers as a cell shows them ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A number read back from its spelling, and half a unit of its last shown digit."""

    value: float
    half_unit: float


def read_number(cell: str, lang: str) -> Shown | None:
    """``1.3 s`` -> 1.3 (± 0.05), ``0.12%`` -> 0.0012, ``1,0e-6`` (id) -> 1e-6, ``2^16`` -> 65536 (exact);
    None for words. A unit (s, GB, ×, %) may follow; a plain ``0`` is an exact zero."""
    text = cell.strip().replace(MINUS, "-")
    if text in ("∞", "-∞"):
        return Shown(math.inf if text == "∞" else -math.inf, 0.0)
    power = _POWER.match(text)
    if power:
        return Shown(2.0 ** int(power.group(1)), 0.0)
    found = _SCI.match(text)
    if not found:
        return None
    mantissa, exponent, unit = found.groups()
    group, point = (".", ",") if lang == "id" else (",", ".")
    mantissa = mantissa.replace(group, "").replace(point, ".")
    try:
        value = float(mantissa)
    except ValueError:
        return None
    if "." in mantissa:
        last = -len(mantissa.split(".")[1])
    else:  # an integer's trailing zeros may be rounding, down to two significant digits (448 is written 450)
        digits = mantissa.lstrip("-")
        last = min(len(digits) - len(digits.rstrip("0")), max(len(digits) - 2, 0))
    scale = 10.0 ** int(exponent) if exponent else 1.0
    if unit == "%":
        scale /= 100
    half = 0.0 if (value == 0 and "." not in mantissa) else 0.5 * 10.0**last * scale
    return Shown(value * scale, half)


def shows(cell: str, x: float, lang: str, exact: bool = False) -> bool:
    """Whether ``cell`` shows the drawn number ``x``: equal if ``exact``, else within display rounding.

    A power of two (``2^16``) shows any x whose log2 rounds to its exponent (scales are drawn as log2 S and
    written rounded to the power)."""
    power = _POWER.match(cell.strip().replace(MINUS, "-"))
    if power and not exact:
        return x > 0 and abs(math.log2(x) - int(power.group(1))) <= 0.5
    shown = read_number(cell, lang)
    if shown is None or not math.isfinite(x):
        return shown is not None and shown.value == x
    if exact:
        return shown.value == x
    return abs(x - shown.value) <= shown.half_unit * (1 + 1e-9) + 1e-12 * abs(shown.value)


def read_range(cell: str, lang: str) -> tuple[Shown, Shown] | None:
    """``5.6e-10 … 1.0e-9`` or ``2^-40 … 2^-39``: the two ends."""
    if RANGE_MARK not in cell:
        return None
    lo, hi = (read_number(part, lang) for part in cell.split(RANGE_MARK, 1))
    return (lo, hi) if lo is not None and hi is not None else None


def in_range(cell: str, x: float, lang: str) -> bool:
    ends = read_range(cell, lang)
    if ends is None:
        return False
    lo, hi = ends
    return lo.value - lo.half_unit <= x <= hi.value + hi.half_unit


# --- the chart's axes --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """How positions on an axis read: ``"linear"``, ``"log10"``, ``"log2"``, ``"category"`` or ``"hidden"``."""

    kind: str
    labels: dict[float, str]
    percent: bool = False

    def value(self, position: float) -> float:
        if self.kind == "log10":
            return 10.0**position
        if self.kind == "log2":
            return 2.0**position
        return float(position)

    def label(self, position: float) -> str | None:
        return self.labels.get(float(round(position))) if self.kind == "category" else None


def read_axis(axis: Spec, lang: str) -> Axis:
    if axis.get("visible") is False:
        return Axis("hidden", {})
    percent = "%" in str(axis.get("tickformat", ""))
    title = str((axis.get("title") or {}).get("text", ""))
    vals, texts = axis.get("tickvals"), axis.get("ticktext")
    if vals and texts:
        numbers = [read_number(t, lang) for t in texts]
        if all(n is not None for n in numbers):
            shown = [n.value for n in numbers if n is not None]
            for kind, f in (("log10", lambda v: 10.0**v), ("log2", lambda v: 2.0**v), ("linear", float)):
                if all(math.isclose(f(v), s, rel_tol=1e-9) for v, s in zip(vals, shown, strict=True)):
                    return Axis(kind, {}, percent)
            raise ValueError(f"tick labels {texts} do not read as any scale of {vals}")
        return Axis("category", {float(v): str(t) for v, t in zip(vals, texts, strict=True)})
    if title.startswith("log2 "):
        return Axis("log2", {}, percent)
    return Axis("linear", {}, percent)


# --- reading the chart against its table -------------------------------------------------------------------------


class Reader:
    """One chart and its table; :meth:`problems` lists every number drawn that the table does not hold."""

    def __init__(self, spec: Spec, table: Table, lang: str) -> None:
        self.spec, self.table, self.lang = spec, table, lang
        layout = spec.get("layout", {})
        self.x = read_axis(layout.get("xaxis", {}), lang)
        self.y = read_axis(layout.get("yaxis", {}), lang)
        self.used: set[int] = set()
        self.found: list[str] = []
        self.matched: set[tuple[int, int]] = set()  # (row, column) of every cell a drawn number was found in
        self._keys: dict[float, list[int]] | None = None  # rows by the number their first cell writes

    # rows and columns
    def rows_named(self, name: str) -> list[int]:
        return [i for i, row in enumerate(self.table.rows) if row and row[0] == name]

    def rows_at(self, x: float) -> list[int]:
        """Rows whose first cell is x (a step, a scale, a position: keys are written exactly), else those whose
        first cell spans it (``lo … hi``)."""
        if self._keys is None:
            self._keys = {}
            for i, row in enumerate(self.table.rows):
                shown = read_number(row[0], self.lang) if row else None
                if shown is not None:
                    self._keys.setdefault(shown.value, []).append(i)
        exact = self._keys.get(x, [])
        return exact or [i for i, row in enumerate(self.table.rows) if row and in_range(row[0], x, self.lang)]

    def column(self, name: str) -> int | None:
        for j, header in enumerate(self.table.headers):
            if j and (header == name or header.startswith(f"{name}:")):
                return j
        return None

    def fail(self, what: str) -> None:
        self.found.append(what)

    def expect(self, rows: list[int], where: str, value: float, column: int | None, exact: bool = False) -> None:
        """``value`` in one of ``rows``: in ``column`` when that column holds numbers there, else in any cell."""
        if not rows:
            self.fail(f"{where}: no row of the table for it")
            return
        for i in rows:
            row = self.table.rows[i]
            numeric = column is not None and column < len(row) and read_number(row[column], self.lang) is not None
            columns = [column] if numeric and column is not None else range(1, len(row))
            hits = [j for j in columns if shows(row[j], value, self.lang, exact)]
            if hits:
                self.used.add(i)
                self.matched.add((i, hits[0]))
                return
        shown = [self.table.rows[i] for i in rows]
        self.fail(f"{where}: draws {value!r}, the table's row shows {shown}")

    # the shapes of chart this module reads
    def problems(self) -> list[str]:
        traces = self.spec.get("data", [])
        if not traces:
            return ["the chart draws nothing"]
        layout = self.spec.get("layout", {})
        if all(t.get("type") == "bar" and "base" in t and t.get("x") == [0] for t in traces):
            self.stacked_column(traces, layout)
        elif any(t.get("type") == "bar" and "base" in t for t in traces):
            self.ranges(traces)
        elif layout.get("barmode") == "stack":
            self.histogram(traces)
        elif all(t.get("type") == "bar" and t.get("orientation") == "h" for t in traces):
            self.bars(traces, layout)
        elif self.y.kind == "hidden":
            self.number_line(traces)
        elif self.y.kind == "category" and set(self.y.labels.values()) <= set(self.table.headers):
            self.strips(traces)
        elif self.y.kind == "category":
            self.ticks(traces)
        elif all(t.get("type") == "scatter" for t in traces):
            self.lines(traces)
        else:
            return [f"a chart this reader cannot read: {[t.get('type') for t in traces]}; teach tests/chartdata.py"]
        unused = [self.table.rows[i] for i in range(len(self.table.rows)) if i not in self.used]
        if unused:
            self.fail(f"rows of the table the chart does not draw: {unused}")
        return self.found

    def stacked_column(self, traces: list[Spec], layout: Spec) -> None:
        """Step 1: one column of parts, each a row named like its bar; the stack's top and any line as rows."""
        top = 0.0
        for t in traces:
            height, base = float(t["y"][0]), float(t["base"][0])
            if not math.isclose(base, top, rel_tol=1e-9, abs_tol=1e-9):
                self.fail(f"{t['name']}: starts at {base}, not on the part below it ({top})")
            top = base + height
            self.expect(self.rows_named(t["name"]), t["name"], height, 1)
        everything = list(range(len(self.table.rows)))
        self.expect(everything, "the top of the column", top, 1)
        for shape in layout.get("shapes", []):
            if shape.get("yref") == "y":
                self.expect(everything, "the line across", float(shape["y0"]), 1)

    def histogram(self, traces: list[Spec]) -> None:
        """Stacked counts per bin: the bin (decoded from the axis) is a ``lo … hi`` row, the count is exact. An
        empty trace (a category with no value at this stop, kept for the legend) draws nothing to look up."""
        for t in traces:
            if not any(t.get("y") or ()):  # no value in this category at this stop (a bar of 0 for the legend)
                continue
            column = self.column(t["name"])
            if column is None:
                self.fail(f"no column for {t['name']!r} in {self.table.headers}")
                continue
            for x, count in zip(t["x"], t["y"], strict=True):
                at = self.x.value(x)
                rows = self.rows_at(at)
                if len(rows) > 1:
                    self.fail(f"{t['name']} at {at:.3g}: in more than one bin of the table")
                self.expect(rows, f"{t['name']} at {at:.3g}", float(count), column, exact=True)

    def ranges(self, traces: list[Spec]) -> None:
        """Step 5: each format's bar from ``base`` to ``base + x`` on a log axis; a strip of sampled values."""
        for t in traces:
            if "base" in t:
                for y, length, base in zip(t["y"], t["x"], t["base"], strict=True):
                    label = self.y.label(y) or ""
                    rows = self.rows_named(label)
                    self.expect(rows, f"{label}: start", self.x.value(base), None)
                    self.expect(rows, f"{label}: end", self.x.value(base + length), None)
            else:  # a strip of values over one row: the row gives their extent
                labels = {self.y.label(y) for y in t["y"]}
                if len(labels) != 1 or None in labels:
                    self.fail(f"{t.get('name')}: a strip across several rows {labels}")
                    continue
                label = labels.pop() or ""
                values = [self.x.value(x) for x in t["x"]]
                self.expect(self.rows_named(label), f"{label}: the smallest", min(values), 1)
                self.expect(self.rows_named(label), f"{label}: the largest", max(values), len(self.table.headers) - 1)
                for i in self.rows_named(label):
                    lo, hi = (
                        read_number(self.table.rows[i][1], self.lang),
                        read_number(self.table.rows[i][-1], self.lang),
                    )
                    if lo is None or hi is None:
                        continue
                    outside = [v for v in values if not lo.value - lo.half_unit <= v <= hi.value + hi.half_unit]
                    if outside:
                        self.fail(f"{label}: draws {outside[:3]} outside the table's {lo.value}..{hi.value}")

    def bars(self, traces: list[Spec], layout: Spec) -> None:
        """Horizontal bars, a row per labelled tick: the written value is the cell, and the bar's length shows it."""
        for t in traces:
            column = self.column(t["name"]) if t.get("name") else 1
            for i, (y, x) in enumerate(zip(t["y"], t["x"], strict=True)):
                label = self.y.label(y) or ""
                rows = self.rows_named(label)
                where = f"{label} · {t.get('name', '')}"
                text = (t.get("text") or [None] * len(t["x"]))[i]
                written = [r for r in rows if column is not None and self.table.rows[r][column : column + 1] == (text,)]
                if text is not None and not written:
                    self.fail(
                        f"{where}: writes {text!r} beside the bar, the table has {[self.table.rows[r] for r in rows]}"
                    )
                self.expect(rows, where, self.x.value(x), column)
        # a line across the bars (the GPU's memory), labelled by its annotation
        annotations = {float(a["x"]): a["text"] for a in layout.get("annotations", []) if a.get("yref") == "paper"}
        for shape in layout.get("shapes", []):
            if shape.get("xref") == "x" and shape.get("type") == "line":
                label = annotations.get(float(shape["x0"]), "")
                self.expect(self.rows_named(label), f"the line {label!r}", float(shape["x0"]), 1)

    def lines(self, traces: list[Spec]) -> None:
        """Values per step (or per scale): the row is the x, the column the trace's name, the cell the y.

        A trace whose column holds words (skipped steps marked with an x) marks rows: they must all say one
        word, and no row it does not mark may say it."""
        marked: dict[int, set[int]] = {}
        for t in traces:
            column = self.column(t["name"])
            if column is None:
                self.fail(f"no column for {t['name']!r} in {self.table.headers}")
                continue
            for x, y in zip(t["x"], t["y"], strict=True):
                at = self.x.value(x)
                rows = self.rows_at(at)
                self.expect(rows, f"{t['name']} at {at:g}", self.y.value(y), column)
                if rows and all(read_number(self.table.rows[r][column], self.lang) is None for r in rows):
                    marked.setdefault(column, set()).update(rows)
        for column, rows in marked.items():
            self.matched.update((r, column) for r in rows)
            words = {self.table.rows[r][column] for r in rows}
            others = {r for r, row in enumerate(self.table.rows) if row[column] in words} - rows
            if len(words) != 1 or others:
                header = self.table.headers[column]
                self.fail(f"{header!r}: the marked rows say {words}, and so do rows it does not mark: {sorted(others)}")

    def number_line(self, traces: list[Spec]) -> None:
        """Points on a line whose positions are distances from one value: each point's hover value is a row
        named like its trace, and position minus value is one constant for every point."""
        shifts = []
        for t in traces:
            for x, hover in zip(t["x"], t["hovertext"], strict=True):
                text = hover.rsplit(": ", 1)[-1]
                shown = read_number(text, self.lang)
                if shown is None:
                    self.fail(f"{t['name']}: hover text {hover!r} has no number")
                    continue
                self.expect(self.rows_named(t["name"]), t["name"], shown.value, 1, exact=True)
                shifts.append(shown.value - float(x))
        if shifts and max(shifts) - min(shifts) > 1e-9 * max(1.0, abs(shifts[0])):
            self.fail(f"the positions are not the values less one constant: shifts {min(shifts)}..{max(shifts)}")

    def ticks(self, traces: list[Spec]) -> None:
        """A row of ticks per format: the row's list of values holds every tick, and its count says how many."""
        for t in traces:
            labels = {self.y.label(y) for y in t["y"]}
            label = labels.pop() if len(labels) == 1 else None
            rows = self.rows_named(label or "")
            if not rows:
                self.fail(f"{t.get('name')}: no row of the table for it")
                continue
            row = self.table.rows[rows[0]]
            listed = [c for c in row[1:] if ", " in c]
            values = {v for c in listed for v in c.split(", ")}
            missing = [x for x in t["x"] if not any(shows(v, float(x), self.lang, exact=True) for v in values)]
            if missing:
                self.fail(f"{label}: draws {missing[:3]} not listed in its row")
            counts = [j for j, c in enumerate(row) if j and shows(c, float(len(t["x"])), self.lang, exact=True)]
            if not counts:
                self.fail(f"{label}: draws {len(t['x'])} ticks, the row's count is not that")
            self.used.add(rows[0])
            self.matched.update((rows[0], j) for j in [*counts[:1], *(j for j, c in enumerate(row) if c in listed)])

    def strips(self, traces: list[Spec]) -> None:
        """A strip per recipe (a column), a mark per position (a row): the cell names what the mark shows."""
        for t in traces:
            for x, y in zip(t["x"], t["y"], strict=True):
                label = self.y.label(y) or ""
                column = self.table.headers.index(label)
                rows = self.rows_at(float(x))
                if not rows:
                    self.fail(f"{label} at {x}: no row of the table for it")
                    continue
                cell = self.table.rows[rows[0]][column]
                if f"({t['name']})" not in cell:
                    self.fail(f"{label} at {x}: marked {t['name']!r}, the table says {cell!r}")
                self.used.update(rows)
                self.matched.add((rows[0], column))


def mutated(cell: str, lang: str) -> str | None:
    """A plausible wrong spelling of a cell a chart's number was found in (a wrong number in the same style, a
    list missing a value, another outcome), or None for a cell of words only."""
    text = cell.replace(MINUS, "-")
    power = _POWER.match(text)
    if power:
        return f"2^{int(power.group(1)) + 3}"
    if RANGE_MARK in cell:
        return RANGE_MARK.join(m for part in cell.split(RANGE_MARK) if (m := mutated(part, lang)) is not None)
    if ", " in cell:
        return ", ".join(cell.split(", ")[1:])
    if cell.endswith(")") and " (" in cell:
        value, outcome = cell[:-1].split(" (", 1)
        return f"{value} (not {outcome})"
    found = _SCI.match(text)
    if not found or read_number(cell, lang) is None:
        return None
    group, point = (".", ",") if lang == "id" else (",", ".")
    digits = found.group(1).lstrip("-")
    number = float(digits.replace(group, "").replace(point, "."))
    return cell.replace(digits, f"{number * 1.5 + 1:.6g}".replace(".", point), 1)


def check(spec: Spec, table: Table, lang: str) -> list[str]:
    """Everything the chart draws that its table does not hold (and the rows it does not draw)."""
    return Reader(spec, table, lang).problems()


@dataclass(frozen=True)
class ScrubChart:
    """A chart a scrub component draws at its current stop, shaped like an AppTest plotly chart (``proto.spec``,
    ``proto.alt``) so the checks read it the same way."""

    proto: Any


def _scrub_charts(node: Any) -> list[ScrubChart]:
    """The charts of a scrub component (lensa.ui.components.scrub) at its sliders' current stops."""
    from types import SimpleNamespace

    from lensa.ui.components import scrub

    data = json.loads(node.proto.json)
    frame = scrub.frame_at(data["parts"][0], data["at"][0])
    return [
        ScrubChart(SimpleNamespace(spec=json.dumps(block["fig"]), alt=block["alt"]))
        for block in frame
        if block["k"] == "chart"
    ]


def charts_and_tables(root: Any, table_label: str) -> Iterator[tuple[Any, Any | None]]:
    """Each plotly chart of an AppTest tree, in page order, with the data table shown after it (before the
    next chart), or None. A scrub component's charts (at its current stops) count as charts; the server writes
    their tables after the component in one section, one per chart, in order (as Markdown text here)."""
    order: list[Any] = []

    def walk(node: Any) -> None:
        kind = getattr(node, "type", None)
        if kind in ("plotly_chart", "expander"):
            order.append(node)
        elif kind == "bidi_component":
            order.append(_scrub_charts(node))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(root)
    for i, node in enumerate(order):
        if isinstance(node, list):  # a scrub's charts: one section follows it, with a table for each chart
            following = order[i + 1] if i + 1 < len(order) else None
            section = following if getattr(following, "label", None) == table_label else None
            tables = [] if section is None else _markdown_tables(section)
            for n, chart in enumerate(node):
                yield chart, tables[n] if n < len(tables) else None
            continue
        if getattr(node, "type", None) != "plotly_chart":
            continue
        following = order[i + 1] if i + 1 < len(order) else None
        table = following if following is not None and getattr(following, "label", None) == table_label else None
        yield node, table


def _markdown_tables(expander: Any) -> list[str]:
    """The Markdown tables of a section, in order (a chart's title above each, where there are several, left out)."""
    return [m.value for m in expander.markdown if m.value.lstrip().startswith("|")]


def table_of(section: Any) -> Table:
    """The table of a chart: a section holding only its table, or one of a scrub's tables (its Markdown)."""
    return parse_markdown_table(section if isinstance(section, str) else _markdown_tables(section)[0])
