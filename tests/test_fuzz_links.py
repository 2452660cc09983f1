"""Hostile links: every page's URL parameters fuzzed through AppTest.

Whatever a link says, a page must never raise; each control must show one of
its positions; and a notice must appear exactly when the link's value could
not be used as given (not a number, out of range, not an option), in which
case the control shows its default or the nearest end of its range.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lensa.numerics.exact import try_parse_exact
from lensa.ui import i18n
from lensa.ui.controls import ChoiceControl, CountControl, TextControl, parse_count
from lensa.ui.site import MEASURED_ONLY, PAGES, PAGES_BY_KEY
from tests.pagetools import notices, open_page, scrub_value

EXAMPLES = 300
JUNK = [
    "nan", "NaN", "-nan", "inf", "-inf", "+Infinity", "1e999", "-1e999", "1e-999", "0x10", "1_000",
    "1,000.5", "--1", "1e", "e5", ".", "", " ", "∞", "١٢٣", "1/2", "<script>alert(1)</script>",
    "%00", "\u202e1e-6", "null", "None", "true", "[]", "{}", "1e-6;DROP TABLE", "０.１",
]  # fmt: skip

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=-1e30, max_value=1e30, allow_nan=False).map(lambda f: f"{f:.6g}"),
    st.floats(min_value=1e-15, max_value=1e5).map(lambda f: f"{f:.3e}"),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
long_values = st.integers(min_value=1_000, max_value=20_000).map(lambda n: "7" * n)
one_value = st.one_of(numbers, st.sampled_from(JUNK), texts, long_values)
link_value = st.one_of(one_value, st.lists(one_value, min_size=2, max_size=3))

_apps: dict[str, object] = {}


def _app(key: str):
    """One AppTest per page, reused: each example is a fresh visit to a new link."""
    if key not in _apps:
        _apps[key] = open_page(key, lang="en", timeout=60)
    return _apps[key]


def _visit(key: str, params: dict[str, object]):
    at = _app(key)
    at.session_state["lensa.seen"] = {}  # forget the last URL: this is a newly opened link
    at.query_params.clear()
    at.query_params.update({"lang": "en", **params})
    at.run(timeout=60)
    return at


def _last(value: object) -> str:
    return value[-1] if isinstance(value, list) else value  # st.query_params reads the last repeat


def _plain_number(raw: str) -> float | None:
    """An independent, stricter reading: what any person would call a number."""
    text = raw.strip()
    if text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    if not text or any(c not in "0123456789.eE+-" for c in text) or text.lower().startswith(("e", "+e", "-e")):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if not math.isnan(value) else None


def _widget_value(at, key: str, name: str):
    if f"w.{key}.{name}" not in at.session_state:  # a slider of the page's scrub: the stop the component is told
        return scrub_value(at, name)
    value = at.session_state[f"w.{key}.{name}"]
    if isinstance(value, bool):  # an on/off switch shows the control's "on"/"off" as True/False
        return "on" if value else "off"
    return value


def _label(key: str, name: str) -> str:
    """The text of a control's label, which notices quote."""
    special = {("formats", "x"): "formats.input", ("lab", "recipes"): "lab.recipes_group"}
    if name == "also":
        return i18n.text("en", "also.label")
    if name == "data":
        return i18n.text("en", "data.data")
    return i18n.text("en", special.get((key, name), f"{key}.{name}"))


def _check_control(at, key: str, control, raw: str, shown_notice: bool) -> None:
    value = _widget_value(at, key, control.name)
    if isinstance(control, TextControl):
        usable = len(raw.strip()) <= 100 and try_parse_exact(raw.strip()) is not None
        assert shown_notice == (not usable)
        assert value == (raw.strip() if usable else control.default)
        return
    if isinstance(control, CountControl):
        # The box shows the count it uses; the control's own reading decides, checked against a plain number.
        reading = control.read(raw)
        assert shown_notice == (reading.problem is not None)
        assert parse_count(value) == reading.value
        number = _plain_number(raw) if len(raw) <= 64 else None
        if number is not None and control.lo <= number <= control.hi:
            assert reading.problem is None and abs(reading.value - number) <= 1
        return
    if isinstance(control, ChoiceControl):
        assert value in control.options
        usable = raw.strip().lower() in control.options
        assert shown_notice == (not usable)
        assert value == (raw.strip().lower() if usable else control.default)
        return
    assert value in control.stops
    number = _plain_number(raw) if len(raw) <= 64 else None
    if number is None:
        assert shown_notice and value == control.default
    elif number < control.lo or number > control.hi:
        assert shown_notice and value in (control.lo, control.hi)
    else:
        assert not shown_notice
        if control.log:
            nearest = min(control.stops, key=lambda s: abs(math.log(s) - math.log(number)))
        else:
            nearest = min(control.stops, key=lambda s: abs(s - number))
        assert value == nearest


LAB_CALIBRATED = {"width": "width", "batch": "batch_size", "steps": "steps"}
LAB_SIZE = {"width", "depth", "batch", "steps"}


def _lab_calibrated(params: dict[str, object]) -> dict[str, object]:
    """The lab's width, batch and steps when a link names none of its size: this machine's calibrated defaults
    (pages/lab.py), or the page's own where the chosen device gives no clock (CUDA asked for without one)."""
    from lensa import live
    from lensa.live.worker import default_worker
    from lensa.ui.site import PAGES_BY_KEY as pages

    device = _last(params.get("device", "auto")).strip().lower()
    lab = pages["lab"]
    try:
        chosen = live.defaults_for(default_worker().clock(device if device in live.DEVICES else "auto"))
    except live.LiveError:
        return {name: lab.control(name).default for name in LAB_CALIBRATED}
    return {name: getattr(chosen, field) for name, field in LAB_CALIBRATED.items()}


def _fuzz_page(key: str):
    page = PAGES_BY_KEY[key]
    names = [c.name for c in page.controls]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )
    @given(params=st.fixed_dictionaries({}, optional=dict.fromkeys(names, link_value)))
    def run(params):
        at = _visit(key, params)
        assert not at.exception, (params, at.exception)
        texts = notices(at)
        custom = _last(params.get("model", "")).strip().lower() == "custom"
        for control in page.controls:
            if control.name == "params" and not custom:
                continue  # a custom size is read only when the model is "custom"
            if control.name in MEASURED_ONLY:
                continue  # read only with a recorded run; the data value is junk or a source with no run here
            if control.name not in params:
                shown = _widget_value(at, key, control.name)
                expected = control.default
                if key == "lab" and control.name in LAB_CALIBRATED and not LAB_SIZE & set(params):
                    expected = _lab_calibrated(params)[control.name]  # this machine's defaults
                assert (parse_count(shown) if isinstance(control, CountControl) else shown) == expected
                continue
            raw = _last(params[control.name])
            label = _label(key, control.name)
            _check_control(at, key, control, raw, shown_notice=any(f"**{label}**" in t for t in texts))
        assert len(texts) <= len(params)

    return run


# A test per page of site.PAGES that has controls (test_memory_links, ...): a new page is fuzzed without an edit here.
for _info in PAGES:
    if _info.controls:
        globals()[f"test_{_info.key}_links"] = _fuzz_page(_info.key)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(lang=link_value, key=st.sampled_from([p.key for p in PAGES if p.key != "lab"]))
def test_any_language_value(lang, key):
    at = _app(key)
    at.session_state["lensa.seen"] = {}
    at.query_params.clear()
    at.query_params["lang"] = lang
    at.run(timeout=60)
    assert not at.exception
    raw = _last(lang)
    usable = raw.strip().lower() in i18n.LANGUAGES
    assert bool(notices(at)) == (not usable)
    if usable:
        assert at.sidebar.button_group[0].value == raw.strip().lower()
