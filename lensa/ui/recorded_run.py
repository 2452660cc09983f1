"""Measured data in steps 2-5: where a recorded run comes from, and the controls that pick what to look at.

A page asks :func:`data_controls` for its selection. With ``data=illustration`` (the default) it returns
None at once and loads nothing, so the lesson's reruns cost what they always did. Otherwise the run comes
from one of three places:

- the reference run shipped with Lensa (``lensa.runstats.reference_run.load_reference()``, loaded once per process);
- the visitor's last live-lab run, which the lab hands over with :func:`set_lab_run`;
- a file from ``recorder.save`` that the visitor uploads (kept for the session, so every step can use it).

When the chosen source has nothing to show, the page says what to do instead and keeps the illustration.
``kind``, ``layer`` and ``step`` are URL-bound like every control, but their options are the run's own;
when the source or the kind changes, the old layer and step mean nothing and start again from the default.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn, TypeVar

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lensa.numerics.formats import FORMATS
from lensa.runstats import MAX_FILE_BYTES, RunStats, RunStatsError, TensorStats, load, measured
from lensa.ui import format_table, i18n, limits, widgets
from lensa.ui.controls import ChoiceControl, NumberControl
from lensa.ui.frame import Page, link_params, page_link, remembered
from lensa.ui.site import DATA, PAGES, PAGES_BY_KEY, RECIPE

LOG = logging.getLogger(__name__)
T = TypeVar("T")
LAB_RUN = "lensa.data.lab"  # this session's last live-lab run, as {arm: RunStats}
UPLOAD = "lensa.data.upload"  # this session's uploaded file: (file id, name, {arm: RunStats})
UPLOAD_REFUSED = "lensa.data.upload_refused"  # the id of an uploaded file refused by the kept-runs budget
RECORDINGS_SEEN = "lensa.data.recordings_seen"  # (lab job id, whether its recordings were kept)
TRACK = "lensa.data.track"  # per page: (source identity, kind) of its last run, to notice a change
MAX_UPLOAD_MB = MAX_FILE_BYTES // (1024 * 1024)
DATA_PAGES = tuple(p.key for p in PAGES if any(c.name == "data" for c in p.controls))
# Characters that mean something inside a line of Markdown (Streamlit's included: $ for maths, ~ and |).
_MARKDOWN_SPECIALS = set("\\`*_{}[]#|~<>$")


def md_escape(text: str, limit: int | None = None) -> str:
    """Text from a file (its name, its recipe) fit to put inside a line of Markdown: one line, specials escaped.

    ``limit`` shortens it to that many characters first (with …).
    """
    plain = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())
    if limit is not None and len(plain) > limit:
        plain = plain[:limit] + "…"
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIALS else ch for ch in plain)


# --- where runs come from ----------------------------------------------------------------------------------


def _arms(runs: RunStats | Mapping[str, RunStats] | Sequence[RunStats]) -> dict[str, RunStats]:
    """A run or several (one per arm) as {arm: run} (:func:`lensa.runstats.measured.arms_of`)."""
    return measured.arms_of(runs)


def set_lab_run(runs: RunStats | Mapping[str, RunStats] | Sequence[RunStats]) -> None:
    """Offer the live lab's last run to the lesson (steps 2-5, ``data=lab``) for the rest of this session.

    ``runs`` is one recorded run or several, one per arm (``{"fp32": ..., "fp16": ...}``, or runs whose
    ``meta["arm"]`` names them). The steps look at the FP32 arm's tensors (the arm with most tensor
    statistics when there is no FP32 arm); an arm with a loss-scale history gives step 3's dynamic run.
    Each call replaces the session's previous lab run.
    """
    arms = _arms(runs)
    st.session_state[LAB_RUN] = (f"lab-{uuid.uuid4().hex}", arms)


def show_lab_run(lang: str, runs: RunStats | Mapping[str, RunStats] | Sequence[RunStats]) -> NoReturn:
    """Offer ``runs`` to the lesson (:func:`set_lab_run`), then open step 2 with ``data=lab`` in ``lang``.

    The link carries step 2's other remembered values, but not the kind, layer and step chosen for another
    run: this one starts from their defaults.
    """
    set_lab_run(runs)
    target = PAGES_BY_KEY[DATA_PAGES[0]]
    params = {k: v for k, v in link_params(target.key, lang).items() if k not in ("kind", "layer", "step")}
    st.switch_page(target.file, query_params={**params, "data": "lab"})


def _may_keep(what: str, runs: Mapping[str, RunStats]) -> bool:
    """Whether this session may keep ``runs`` as its ``what`` ("lab", "upload"), by the server's budget."""
    ctx = get_script_run_ctx()
    session = ctx.session_id if ctx is not None else "no-session"
    return limits.RECORDINGS.keep(f"{session}/{what}", limits.recordings_bytes(runs.values()))


def keep_lab_recordings(job: Any) -> bool:
    """Count a finished lab job's recordings against the server's budget (:data:`lensa.ui.limits.RECORDINGS`).

    Once per job: past the budget the job's result keeps its numbers but loses its recordings (so the lesson
    cannot be offered them) and this returns False, every time the page asks about that job.
    """
    seen = st.session_state.get(RECORDINGS_SEEN)
    if seen is not None and seen[0] == job.id:
        return bool(seen[1])
    comparison = getattr(job, "result", None)
    if comparison is None or not hasattr(comparison, "recordings"):
        return True
    recordings = comparison.recordings()
    if not recordings:
        return True
    kept = _may_keep("lab", recordings)
    if not kept:
        arms = {name: replace(arm, recording=None) for name, arm in comparison.arms.items()}
        job.result = replace(comparison, arms=arms)
    st.session_state[RECORDINGS_SEEN] = (job.id, kept)
    return kept


def lab_run() -> tuple[str, dict[str, RunStats]] | None:
    """This session's live-lab run as (identity, arms), or None before the lab has offered one."""
    return st.session_state.get(LAB_RUN)


@st.cache_resource(max_entries=1, show_spinner=False)
def _load_reference() -> tuple[dict[str, RunStats] | None, str | None]:
    """The shipped reference run once per process: (arms, None), or (None, why it is unavailable)."""
    try:
        from lensa.runstats import reference_run as shipped  # this module names its own reference_run()
    except ModuleNotFoundError as e:
        if e.name not in ("lensa.runstats.reference_run", "lensa"):
            raise
        return None, None
    try:
        return _arms(shipped.load_reference()), None
    except (RunStatsError, OSError, TypeError, ValueError) as e:
        LOG.warning("the reference run could not be loaded: %s", e)
        return None, str(e)


def reference_run() -> tuple[dict[str, RunStats] | None, str | None]:
    """The reference run's arms, or None and why (None when this copy of Lensa has no reference run)."""
    return _load_reference()


def _read_upload(data: bytes) -> dict[str, RunStats]:
    return _arms(load(data))


@dataclass(frozen=True)
class Source:
    """A recorded run to show: the arm whose tensors the steps read, the arm with a scaler history, and a label."""

    key: str  # "reference", "lab" or "upload"
    ident: str
    arms: dict[str, RunStats]
    name: str = ""  # the uploaded file's name

    @property
    def tensors(self) -> RunStats:
        """The FP32 arm where there is one, else the arm with most tensors
        (:func:`lensa.runstats.measured.tensors_arm`)."""
        return self.arms[self.tensors_arm]

    @property
    def tensors_arm(self) -> str:
        return measured.tensors_arm(self.arms)

    @property
    def scaler(self) -> RunStats | None:
        arm = measured.scaler_arm(self.arms)
        return None if arm is None else self.arms[arm]

    @property
    def recipe(self) -> Any:
        for run in self.arms.values():
            if "recipe" in run.meta:
                return run.meta["recipe"]
        return None


def _upload(page: Page) -> Source | None:
    file = st.file_uploader(
        page.t("data.upload"),
        type=["npz"],
        key=f"w.{page.info.key}.upload",
        help=page.t("data.upload_help"),
        max_upload_size=MAX_UPLOAD_MB,
    )
    kept = st.session_state.get(UPLOAD)
    if file is not None and file.file_id == st.session_state.get(UPLOAD_REFUSED):
        st.warning(page.t("limits.upload_runs_busy"), icon=":material/hourglass_top:")
    elif file is not None and (kept is None or kept[0] != file.file_id):
        name = md_escape(file.name, limit=60)
        try:
            arms = _read_upload(file.getvalue())
        except RunStatsError as e:
            st.error(page.t("data.upload_error", name=name, detail=md_escape(str(e))), icon=":material/error:")
            return None if kept is None else Source("upload", kept[0], kept[2], kept[1])
        if not _may_keep("upload", arms):
            # Past the server's budget for kept runs: this file is not kept (nor read again on the next run).
            st.session_state[UPLOAD_REFUSED] = file.file_id
            st.warning(page.t("limits.upload_runs_busy"), icon=":material/hourglass_top:")
            return None if kept is None else Source("upload", kept[0], kept[2], kept[1])
        kept = (file.file_id, name, arms)
        st.session_state[UPLOAD] = kept
    if kept is None:
        st.info(page.t("data.no_upload"), icon=":material/upload_file:")
        return None
    return Source("upload", kept[0], kept[2], kept[1])


def _source(page: Page, data: str) -> Source | None:
    if data == "reference":
        arms, problem = reference_run()
        if arms is None:
            key = "data.reference_broken" if problem else "data.reference_missing"
            st.info(page.t(key, detail=md_escape(problem or "")), icon=":material/info:")
            return None
        return Source("reference", "reference", arms)
    if data == "lab":
        lab = lab_run()
        if lab is None:
            st.info(page.t("data.no_lab"), icon=":material/science:")
            page_link("pages/lab.py", label=page.t("data.lab_link"), icon=":material/arrow_forward:")
            return None
        return Source("lab", lab[0], lab[1])
    return _upload(page)


# --- what to look at -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The run and the tensors a page shows: one kind, one layer (or all), one recorded step."""

    source: Source
    kind: str
    layer: str
    step: int
    stats: TensorStats

    @property
    def run(self) -> RunStats:
        return self.source.tensors


def _track(page: Page) -> dict[str, tuple[str, str | None]]:
    if TRACK not in st.session_state:
        st.session_state[TRACK] = {}
    track: dict[str, tuple[str, str | None]] = st.session_state[TRACK]
    return track


def data_choice(page: Page, compact: bool = False) -> str:
    """The data source choice (URL ``data``); ``compact``: a drop-down, for the row of secondary choices under a
    step's picture (its help stays a caption: a tooltip opens only on hover)."""
    # The data choice also travels in the links into the other steps (the footer's too): a change redraws it all.
    label, show, help_text = page.t("data.data"), lambda v: page.t(f"data.source_{v}"), page.t("data.data_help")
    if compact:
        data = widgets.dropdown(page, "data", label, show, help=help_text, whole_page=True)
    else:
        data = widgets.choice(page, "data", label, show, help=help_text, whole_page=True)
    _share_choice(page, data)
    return data


def data_controls(page: Page, data: str | None = None) -> Selection | None:
    """Draw the data control (unless its value ``data`` was read already: :func:`data_choice`) and, for measured
    data, what to look at; None means: show the illustration."""
    if data is None:
        data = data_choice(page)
    track = _track(page)
    if data == "illustration":
        return None
    source = _source(page, data)
    if source is None:
        return None
    previous = track.get(page.info.key)
    if previous is not None and previous[0] != source.ident:
        _forget_stale(page, ("kind", "layer", "step"))
    run = source.tensors
    declared = widgets.declared(page, "kind", ChoiceControl)
    kinds = tuple(k for k in declared.options if run.steps(k))
    if not kinds:
        key = "data.no_kind" if len(declared.options) == 1 else "data.no_tensors"
        st.info(page.t(key, kind=page.t(f"data.kind_{declared.default}")), icon=":material/info:")
        track[page.info.key] = (source.ident, None)
        return None
    default_kind = declared.default if declared.default in kinds else kinds[0]
    kind_control = ChoiceControl("kind", kinds, default_kind)
    kind = widgets.dropdown(page, "kind", page.t("data.kind"), lambda v: page.t(f"data.kind_{v}"), control=kind_control)
    if previous is not None and previous[0] == source.ident and previous[1] not in (None, kind):
        _forget_stale(page, ("layer", "step"))
    track[page.info.key] = (source.ident, kind)
    layers = (measured.ALL_LAYERS, *(n for n in run.names(kind) if n != measured.ALL_LAYERS))
    layer = widgets.dropdown(
        page,
        "layer",
        page.t("data.layer"),
        lambda v: page.t("data.layer_all") if v == measured.ALL_LAYERS else v,
        control=ChoiceControl("layer", layers, measured.ALL_LAYERS),
    )
    steps = tuple(run.steps(kind)) if layer == measured.ALL_LAYERS else _steps_of(run, kind, layer)
    step_control = NumberControl("step", steps, steps[-1], integer=True)
    if len(steps) > 1:
        step = int(widgets.slider(page, "step", page.t("data.step"), page.num, control=step_control))
    else:
        step = int(steps[0])
    if source.key == "reference" and source.recipe is not None:
        with st.expander(page.t("data.recipe_title"), icon=":material/receipt_long:"):
            st.markdown(recipe_markdown(source.recipe))
    return Selection(source, kind, layer, step, measured.tensor_stats(run, kind, layer, step))


def secondary_choices(page: Page, also: bool = True) -> tuple[str, str]:
    """A step's secondary choices in one compact row, out of the picture's way: the data source and, where the step
    has it, "also show" ("none" where it has not). Returns (data, also)."""
    columns = st.columns(2 if also else 1, gap="small")
    with columns[0]:
        data = data_choice(page, compact=True)
    if not also:
        return data, "none"
    with columns[1]:
        shown = format_table.also_control(page, compact=True)
    return data, shown


def _share_choice(page: Page, data: str) -> None:
    """The data is a choice for the whole lesson: links into the other steps carry it (the last choice wins)."""
    for other in DATA_PAGES:
        if other == page.info.key:
            continue
        memory = remembered(other)
        if data == DATA.default:
            memory.pop("data", None)
        else:
            memory["data"] = data


def _forget_stale(page: Page, names: Sequence[str]) -> None:
    """The data changed under these controls: drop their values, unless a new link just brought them."""
    for name in names:
        if not widgets.url_moved(page, name):
            widgets.forget(page, name)


def _steps_of(run: RunStats, kind: str, layer: str) -> tuple[int, ...]:
    steps = []
    for s in run.steps(kind):
        try:
            run.get(kind, layer, s)
        except KeyError:
            continue
        steps.append(s)
    return tuple(steps)


def recipe_markdown(recipe: Any) -> str:
    """A recipe from a run's meta as a Markdown list (a mapping) or a paragraph (text)."""
    if isinstance(recipe, Mapping):
        return "\n".join(f"- **{md_escape(k)}**: {md_escape(_plain(v))}" for k, v in recipe.items())
    return md_escape(_plain(recipe))


def _plain(value: Any) -> str:
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_plain(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value)
    return str(value)


# --- words about a selection -------------------------------------------------------------------------------


def kind_words(page: Page, kind: str) -> str:
    return page.t(f"data.kind_{kind}")


def layer_words(page: Page, layer: str) -> str:
    return page.t("data.layer_all") if layer == measured.ALL_LAYERS else f"`{layer.replace('`', '')}`"


def source_line(page: Page, sel: Selection, every_step: bool = False) -> str:
    """The caption sentence naming the data: which run, which tensors, which layer, which step (or all of them);
    then what a recording in a narrow type cannot say (:func:`dtype_note`)."""
    when = page.t("data.all_steps") if every_step else page.t("data.at_step", step=page.num(sel.step))
    what = page.t("data.what", kind=kind_words(page, sel.kind), layer=layer_words(page, sel.layer), when=when)
    line = page.t(f"data.line_{sel.source.key}", what=what, name=sel.source.name, arm=arm_words(page, sel.source))
    note = dtype_note(page, sel.stats, sel.kind)
    return f"{line} {note}" if note else line


def dtype_note(page: Page, stats: TensorStats, kind: str) -> str:
    """What the tensors' own type (file version 3) means for the columns: a format that holds every value of that
    type loses nothing of them by construction, so only an FP32 recording answers whether it would do; an update
    of a narrow weight is the one the optimizer meant to make. Empty for FP32 tensors and older files."""
    from lensa.runstats import SUMMARY_FORMATS

    dtypes = stats.dtypes
    if not dtypes:
        return ""
    names = ", ".join(FORMATS[k].label if (k := measured.format_of_dtype(d)) else d for d in dtypes)
    if kind == "update":
        return page.t("data.intended_note", dtypes=names) if stats.intended else ""
    trivial = measured.trivial_formats(dtypes, SUMMARY_FORMATS)
    if not trivial:
        return ""
    return page.t("data.trivial_note", dtypes=names, formats=", ".join(FORMATS[f].label for f in trivial))


def scaler_line(page: Page, source: Source) -> str:
    """The caption sentence naming the run a loss-scale history comes from."""
    return page.t(f"data.scaler_{source.key}", name=source.name)


def arm_words(page: Page, source: Source) -> str:
    arm = source.tensors_arm
    return FORMATS[arm].label if arm in FORMATS else md_escape(arm)


def shares_note(page: Page, stats: TensorStats) -> str:
    """How the shares are counted: of the non-zero values; exact zeros left out (when there are any)."""
    if stats.exact_zero:
        return page.t("data.shares_zeros", n=page.num(stats.nonzero), zeros=page.num(stats.exact_zero))
    return page.t("data.shares", n=page.num(stats.nonzero))


def pct(page: Page, share: float) -> str:
    """A share, with the cases a real run can give: NaN (no values) as —, inf (an overflow) as ∞."""
    if np.isnan(share):
        return "—"
    if np.isinf(share):
        return "∞"
    return page.pct(share)


def pcts(page: Page, shares: Mapping[str, float]) -> dict[str, str]:
    """Shares shown together, the parts of one whole (a run's zones), written to add up to 100%
    (:func:`lensa.ui.i18n.percents`); with a share NaN or inf (no values, an overflow) each as :func:`pct`."""
    if all(np.isfinite(share) for share in shares.values()):
        return i18n.percents(shares, page.lang)
    return {key: pct(page, share) for key, share in shares.items()}


def format_rows(
    page: Page, stats: TensorStats, keys: Sequence[str], scale_exps: dict[str, int] | None = None
) -> list[dict[str, str]]:
    """Per format: what it does to the recorded values, as table rows.

    With ``scale_exps`` each format's values are first multiplied by 2**k (its own k, 0 where none is
    given), and the error column is left out: the run's statistics hold the rounding error of the values
    as recorded, not of every scaled copy.
    """
    columns = ("format", "zero", "subnormal", "overflow") + (() if scale_exps else ("error",))
    head = {k: page.t(f"common.col_{k}") for k in columns}
    rows = []
    for key in keys:
        k = (scale_exps or {}).get(key, 0)
        shares = measured.zone_shares(stats, key, k)
        row = {
            head["format"]: FORMATS[key].label + (f" × 2^{k}" if k else ""),
            head["zero"]: pct(page, shares["zero"]),
            head["subnormal"]: pct(page, shares["subnormal"]),
            head["overflow"]: pct(page, shares["overflow"]),
        }
        if not scale_exps:
            row[head["error"]] = pct(page, stats.mean_relative_error(key))
        rows.append(row)
    return rows


def layer_frame(
    page: Page, rows: Sequence[measured.LayerRow], columns: Sequence[tuple[str, str, str]]
) -> list[dict[str, str]]:
    """Table rows: the layer, its non-zero values, then (header, format, zone or "error") per column."""
    out = []
    for row in rows:
        line = {page.t("data.col_layer"): row.name, page.t("data.col_values"): page.num(row.nonzero)}
        for header, fmt, what in columns:
            line[header] = pct(page, row.errors[fmt] if what == "error" else row.shares[fmt][what])
        out.append(line)
    return out


def bar_top(values: Sequence[float], floor: float = 0.0) -> float:
    """The end of a share axis: a little past the largest finite value (and at least ``floor``)."""
    finite = [v for v in values if np.isfinite(v)]
    return max([floor, *finite]) * 1.3 or 1.0


def finite_bars(values: Sequence[float]) -> tuple[list[float], float]:
    """Bar lengths for values that may be inf (an error once something overflows) or NaN, and the axis end.

    An infinite value is drawn to the end of the axis (its text says ∞); NaN draws no bar.
    """
    top = bar_top(values, floor=0.01)
    return [top if np.isinf(v) else (0.0 if np.isnan(v) else float(v)) for v in values], top


# --- block recipes on the recorded run (file version 2): tables shared by the block page and steps 2, 3, 5 ------


def _db(page: Page, x: float) -> str:
    if np.isnan(x):
        return "—"
    if np.isinf(x):
        return "∞" if x > 0 else "−∞"
    return page.t("recipes.db", x=page.num(x, 1))


def recipe_label(page: Page, key: str) -> str:
    from lensa.numerics.blockscale import RECIPES

    return RECIPES[key].label


def recipe_section(page: Page, sel: Selection) -> None:
    """Per layer and recipe at the chosen step, the recipe over training, which layers could go narrower, and
    delayed scaling replayed on the amax of every step. Says so when the run's file predates them."""
    run = sel.run
    st.subheader(page.t("recipes.title"))
    if not run.has_recipes:
        if run.version < 2:
            st.info(page.t("recipes.predates", version=page.num(run.version)), icon=":material/history:")
        else:
            st.info(page.t("recipes.not_kept"), icon=":material/info:")
        return
    recipe = widgets.dropdown(
        page,
        "recipe",
        page.t("recipes.recipe"),
        lambda k: recipe_label(page, k),
        control=RECIPE,
        help=page.t("recipes.recipe_help"),
    )
    _recipe_at_step(page, sel, recipe)
    _recipe_over_training(page, sel, recipe)
    _verdicts(page, sel)
    _delayed(page, sel)


def illustration_or_run(
    page: Page,
    illustration: Callable[[DeltaGenerator, str], None],
    show_measured: Callable[[Selection, str], None],
    also: bool = True,
) -> None:
    """A lesson that a recorded run can replace. Under a place kept for the picture, the secondary choices in a row
    (data source, "also show"); then either the illustration, which draws its sliders, chart, cards and "Try this"
    in the picture's place (and calls :func:`lensa.ui.layout.after_controls` once its sliders are read) and its
    paragraph and tables here, or a recorded run, whose own controls and charts follow the row (``show_measured``
    reads any control of its own, then calls :func:`lensa.ui.layout.after_controls`, or leaves that call to the
    lesson fragment, which makes it once ``show_measured`` returns)."""
    picture = st.container()
    data, shown = secondary_choices(page, also)
    selection = data_controls(page, data)
    if selection is None:
        illustration(picture, shown)
        return
    show_measured(selection, shown)


def measured_also(page: Page, sel: Selection, also: str, fp8_note: str | None = None) -> None:
    """What "also show" adds under a recorded run: the 16-bit and FP8 formats on the run's values (and
    ``fp8_note`` under them), a note that the narrower formats need the values themselves, and every block
    recipe (file version 2)."""
    if format_table.shows(also, "fp8"):
        st.subheader(page.t("fp8_title"))
        keys = (*format_table.SIXTEEN_BIT_KEYS, *format_table.FP8_KEYS)
        st.dataframe(format_rows(page, sel.stats, keys), hide_index=True)
        if fp8_note is not None:
            st.markdown(fp8_note)
    if format_table.shows(also, "narrow"):
        st.caption(page.t("also.measured_note"))
    if also != "none":
        recipe_section(page, sel)


def _lost_cells(page: Page, lost: tuple[float, float, float]) -> dict[str, str]:
    """A recipe's (flushed, saturated, SQNR) as table cells under their headings."""
    flushed, saturated, sqnr = lost
    return {
        page.t("recipes.col_flushed"): pct(page, flushed),
        page.t("recipes.col_saturated"): pct(page, saturated),
        page.t("recipes.col_sqnr"): _db(page, sqnr),
    }


def _recipe_at_step(page: Page, sel: Selection, recipe: str) -> None:
    """The chosen recipe on every layer at the chosen step; with one layer chosen, every recipe on it too."""
    from lensa.numerics.blockscale import RECIPES

    kind, step = sel.kind, sel.step
    rows = measured.recipe_rows(sel.run, kind, step, tuple(RECIPES))
    if sel.layer != measured.ALL_LAYERS:
        rows = [r for r in rows if r.name == sel.layer]
    st.caption(
        page.t("recipes.at_step", kind=kind_words(page, kind), step=page.num(step), recipe=recipe_label(page, recipe))
    )
    st.dataframe(
        [
            {
                page.t("recipes.col_layer"): r.name,
                page.t("recipes.col_values"): page.num(r.nonzero),
                **_lost_cells(page, r.lost[recipe]),
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
    )
    if sel.layer != measured.ALL_LAYERS and rows:
        st.caption(page.t("recipes.every_recipe", layer=layer_words(page, sel.layer), step=page.num(step)))
        st.dataframe(
            [
                {page.t("recipes.col_recipe"): recipe_label(page, key), **_lost_cells(page, rows[0].lost[key])}
                for key in RECIPES
            ],
            hide_index=True,
            width="stretch",
        )


def _recipe_over_training(page: Page, sel: Selection, recipe: str) -> None:
    """The chosen recipe at every recorded step, on the chosen layer or on all of them together."""
    steps, values = measured.recipe_over_training(sel.run, sel.kind, sel.layer, recipe)
    st.caption(
        page.t(
            "recipes.over_training_all" if sel.layer == measured.ALL_LAYERS else "recipes.over_training",
            recipe=recipe_label(page, recipe),
            layer=layer_words(page, sel.layer),
        )
    )
    st.dataframe(
        [{page.t("recipes.col_step"): page.num(t), **_lost_cells(page, v)} for t, v in zip(steps, values, strict=True)],
        hide_index=True,
        width="stretch",
    )


def _verdicts(page: Page, sel: Selection) -> None:
    st.markdown(f"##### {page.t('recipes.verdict_title')}")
    rows = measured.recipe_rows(sel.run, sel.kind, sel.step, measured.VERDICT_RECIPES)
    yes, no = page.t("recipes.yes"), page.t("recipes.no")
    st.dataframe(
        [
            {
                page.t("recipes.col_layer"): r.name,
                **{recipe_label(page, k): yes if measured.fits(r.lost[k]) else no for k in measured.VERDICT_RECIPES},
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
    )
    st.caption(
        page.t(
            "recipes.thresholds",
            flushed=page.pct(measured.MAX_FLUSHED),
            saturated=page.pct(measured.MAX_SATURATED),
            sqnr=_db(page, measured.MIN_SQNR_DB),
        )
    )


def _delayed(page: Page, sel: Selection) -> None:
    st.markdown(f"##### {page.t('recipes.delayed_title')}")
    replays = measured.delayed_replays(sel.run, sel.kind, sel.layer)
    if not replays:
        st.info(page.t("recipes.no_amax"), icon=":material/info:")
        return

    def listed(steps: list[int]) -> str:
        shown = ", ".join(page.num(s) for s in steps[:12])
        return shown + (" …" if len(steps) > 12 else "") if steps else "—"

    st.dataframe(
        [
            {
                page.t("recipes.col_layer"): r.name,
                page.t("recipes.col_steps"): page.num(len(r.steps)),
                page.t("recipes.col_long", n=page.num(1024)): listed(r.overflow[1024]),
                page.t("recipes.col_short", n=page.num(16)): listed(r.overflow[16]),
                page.t("recipes.col_current"): page.num(0),
            }
            for r in replays
        ],
        hide_index=True,
        width="stretch",
    )
    st.caption(page.t("recipes.delayed_caption"))
