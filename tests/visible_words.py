"""The words a page shows before the learner opens anything: what tests/test_word_budget.py counts.

Counted: the text of everything the main area draws, as a learner reads it on arrival: titles, headings,
paragraphs, captions, notices (info, success, warning, error), metric labels and values, every control's
label and what it shows (a radio's or a segmented control's options, a slider's value and the two ends
written under it, a select box's current choice), button and link labels, a table's headings and cells, and
the label of every expander. Not counted: what a closed expander holds (the notes, a chart's data table,
"How a float is stored"), the sidebar (the site's navigation, the same on every page), styles and scripts
(``st.html``), and the text inside a chart (axis ticks, legends), which the seed's count includes but a
learner does not read as prose.

A component (Streamlit components v2) shows text that the element tree holds only as its payload: its
strings are counted through :data:`COMPONENT_TEXT`, one function per component name from the payload's JSON
to the strings it shows. An element of a kind this module does not know fails the count rather than being
left out, so a new kind of element cannot make a page look shorter than it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block, Expander, Node, Status, Tab

from lensa.ui.components import scrub

# A word: a run of non-space characters with a letter or a digit in it ("4,3%", "2^−14", "FP16"; not "·" or "→").
_WORD = re.compile(r"\S*[^\W_]\S*")
_ICON = re.compile(r":material/[a-z_]+:")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_MARKS = re.compile(r"[*_`#|>]+")

# Elements that show no words of their own: layout, styles and scripts, charts (their text is the chart's).
_SILENT = {"html", "plotly_chart", "space", "divider", "empty", "vega_lite_chart", "image"}
# For a component, its registered name -> the strings it shows, read from the data the page sent it (its JSON,
# decoded): the labels and values of its cards, its "Try this" line, its control's label and value. A component
# that draws words its data does not carry (a caption typed into its JavaScript) would escape this count: keep the
# words in the catalogue and send them.
COMPONENT_TEXT: dict[str, Callable[[Any], list[str]]] = {}


def scrub_words(data: Any) -> list[str]:
    """What a scrub component (lensa.ui.components.scrub) shows on arrival: each slider's label, its value and its
    help line, then the frame at the first slider's stop (as ``scrub.js`` draws it first): the charts' titles and
    captions, the cards' labels and values, and "Try this" (label and text). A chart's text alternative is for
    screen readers and its plot's own text is the chart's, as for ``st.plotly_chart``."""
    parts = [json.loads(p) for p in data["parts"]]
    shown: list[str] = []
    for part, at in zip(parts, data["at"], strict=True):
        shown += [part["label"], part["stops"][at], part["help"]]
    for block in scrub.frame_at(parts[0], data["at"][0]):
        if block["k"] == "chart":
            shown += [block["title"], block["caption"]]
        elif block["k"] == "cards":
            shown += [w for card in block["cards"] for w in card]
        elif block["k"] == "note":
            shown += [block["label"], block["text"]]
        else:
            raise AssertionError(f"a scrub block of kind {block['k']!r} that tests/visible_words.py cannot read")
    return shown


COMPONENT_TEXT[scrub.NAME] = scrub_words


def plain(text: str) -> str:
    """Markdown as it reads: links as their text, emphasis and table marks and icons gone."""
    return _MARKS.sub(" ", _LINK.sub(r"\1", _ICON.sub(" ", text)))


def count(text: str) -> int:
    """The words in ``text`` (after :func:`plain`): the same rule counts the seed's steps."""
    return len(_WORD.findall(plain(text)))


def _children(node: Node) -> Iterator[Node]:
    children = getattr(node, "children", None)
    if children:
        yield from children.values()


def _element_texts(node: Any) -> list[str]:
    kind = node.type
    proto = node.proto
    if kind in _SILENT:
        return []
    if kind in ("title", "header", "subheader", "markdown", "caption", "text", "latex", "code"):
        return [str(node.value)]
    if kind in ("info", "success", "warning", "error", "exception", "toast"):
        return [str(node.value)]
    if kind == "metric":
        return [proto.label, proto.body]
    visibility = getattr(proto, "label_visibility", None)
    visible_label = [proto.label] if hasattr(proto, "label") and getattr(visibility, "value", 0) == 0 else []
    if kind == "radio":
        return [*visible_label, *proto.options]
    if kind == "button_group":
        return [*visible_label, *(o.content for o in proto.options)]
    if kind == "select_slider":
        shown = [proto.options[i] for i in node.value_indices] if hasattr(node, "value_indices") else []
        ends = [proto.options[0], proto.options[-1]] if proto.options else []
        return [*visible_label, *(shown or [str(node.format_func(node.value))]), *ends]
    if kind == "slider":
        return [*visible_label, str(node.value), str(proto.min), str(proto.max)]
    if kind == "selectbox":
        return [*visible_label, str(node.format_func(node.value)) if node.value is not None else proto.placeholder]
    if kind in ("text_input", "number_input", "text_area"):
        return [*visible_label, str(node.value or "")]
    if kind in ("checkbox", "toggle", "button", "download_button", "link_button", "form_submit_button"):
        return [proto.label]
    if kind == "page_link":
        return [proto.label]
    if kind == "file_uploader":
        return [*visible_label]
    if kind in ("arrow_data_frame", "arrow_table", "dataframe", "table"):
        frame = node.value
        cells = [str(c) for c in frame.columns]
        cells += [str(v) for row in frame.itertuples(index=False) for v in row]
        return cells
    if kind in ("bidi_component", "component_instance"):
        # components v2 (bidi_component): the registered name, and the data the page sent as JSON (``json``, or
        # the JSON part of ``mixed`` when the data holds dataframes); v1 (component_instance): ``json_args``.
        name = getattr(proto, "component_name", "")
        if name not in COMPONENT_TEXT:
            raise AssertionError(f"a component ({name or kind}) whose words tests/visible_words.py cannot read")
        raw = getattr(proto, "json", "") or getattr(getattr(proto, "mixed", None), "json", "")
        raw = raw or getattr(proto, "json_args", "")
        return COMPONENT_TEXT[name](json.loads(raw or "null"))
    raise AssertionError(f"an element of kind {kind!r} that tests/visible_words.py does not know how to read")


def texts(node: Node) -> Iterator[str]:
    """Every text ``node`` shows, in order, leaving out what closed expanders and popovers hold and every tab
    but the first."""
    if isinstance(node, Block):
        if isinstance(node, Expander | Status) or node.type == "popover":
            yield node.proto.label if isinstance(node, Expander | Status) else node.proto.popover.label
            return
        tabs = [child for child in _children(node) if isinstance(child, Tab)]
        if tabs:
            yield from (tab.label for tab in tabs)
            yield from texts(tabs[0])
            for child in _children(node):
                if not isinstance(child, Tab):
                    yield from texts(child)
            return
        for child in _children(node):
            yield from texts(child)
        return
    yield from _element_texts(node)


def shown_words(at: AppTest) -> int:
    """The words the main area of ``at``'s page shows on arrival (see the module's docstring)."""
    return sum(count(t) for t in texts(at.main))
