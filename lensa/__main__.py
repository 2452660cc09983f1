"""``python -m lensa report RUN.npz`` (or ``lensa report RUN.npz``): the lesson's verdict on a recorded run, no browser.

::

    lensa report run.npz                       # tables and sentences, in English (Indonesian under an id locale)
    lensa report run.npz --json                # the same as one JSON document (docs/report.md: its schema)
    lensa report run.npz --check fp16          # exit 1 if FP16 would lose more than 0.1% of a checked kind
    lensa report run.npz --check mxfp8_e4m3    # any block recipe too (a run recorded with recipes=True)
    lensa report run.npz --html report.html    # one self-contained HTML file: the report and the lesson's charts
    lensa report runs/                         # every .npz in a folder (or several files): the arms of one run
    lensa merge run.npz rank0.npz rank1.npz    # one run from a distributed run's per-rank files (checked first)

Exit codes: 0 done (and every check passed), 1 a check failed, 2 the file could not be read or the arguments
are wrong (the message says which). The numbers are :mod:`lensa.runstats.report`'s, which are the pages' own; the text
comes from the same catalogues as the pages (``lensa/text``): in ``--lang``, else Indonesian where the
``LC_ALL`` / ``LC_MESSAGES`` / ``LANG`` locale starts with ``id``, else English (a terminal's locale is often
``C.UTF-8``, which names no language). The text fits the terminal's width (``shutil.get_terminal_size``, or
``--width``): a table too wide for it is cut into tables of fewer columns, long sentences and lists wrap. Output
into a pipe that closes early (``| head``) ends quietly, with the check's exit code.

This module imports numpy and the core only (plotly too, through :mod:`lensa.ui.report_html`, for ``--html``
alone): no streamlit, no torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from lensa.numerics.blockscale import RECIPES
from lensa.numerics.formats import FORMATS
from lensa.runstats import KINDS, NotOneRunError, RunStats, RunStatsError, check_one_run, load, merge_ranks
from lensa.runstats import report as R
from lensa.ui import i18n

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_WIDTH = 100  # columns, where the output is no terminal and COLUMNS is not set
MIN_WIDTH = 40


def _language(requested: str | None) -> str:
    """``--lang``, else Indonesian for an ``id*`` locale, else English (the command line's default)."""
    if requested in i18n.LANGUAGES:
        return requested
    locale = next((os.environ[v] for v in ("LC_ALL", "LC_MESSAGES", "LANG") if os.environ.get(v)), "")
    return "id" if locale.strip().lower().startswith("id") else "en"


def _width(requested: int | None) -> int:
    if requested is not None:
        return max(MIN_WIDTH, requested)
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


class _Words:
    """Text and numbers in one language, written as the pages write them (plain text: Markdown marks dropped)."""

    def __init__(self, lang: str, width: int = DEFAULT_WIDTH) -> None:
        self.lang = lang
        self.width = width

    def t(self, key: str, **values: object) -> str:
        return i18n.text(self.lang, key, **values).replace("**", "").replace("*", "")

    def pct(self, share: float | None, nan_text: str = "—") -> str:
        """A share as the pages' ``data.pct`` writes it: — for no values, ∞ for an overflow (None in JSON)."""
        return nan_text if share is None else i18n.percent(share, self.lang)

    def pcts(self, shares: dict[str, float | None]) -> dict[str, str]:
        """A whole's parts (a format's zones) as the pages' cards write them, adding up to 100%
        (:func:`lensa.ui.i18n.percents`); each as :meth:`pct` where one is missing."""
        if any(share is None for share in shares.values()):
            return {key: self.pct(share) for key, share in shares.items()}
        return i18n.percents({key: share for key, share in shares.items() if share is not None}, self.lang)

    def num(self, x: float) -> str:
        return i18n.number(x, self.lang)

    def db(self, x: float | None) -> str:
        return "—" if x is None else self.t("recipes.db", x=i18n.number(x, self.lang, 1))

    def kind(self, kind: str, capital: bool = False) -> str:
        words = self.t(f"data.kind_{kind}")
        return words[:1].upper() + words[1:] if capital else words

    def scale(self, k: int | None) -> str:
        """2^k; past the top of the search (2^64) "≥ 2^64": no scale searched overflows, not that 2^64 is the end."""
        from lensa.runstats.measured import SCALE_SEARCH

        if k is None:
            return "—"
        return ("≥ " if k == SCALE_SEARCH[-1] else "") + i18n.power_of_two(k)

    def say(self, text: str, out: TextIO, indent: str = "  ", first: str | None = None) -> None:
        """``text`` wrapped to the width, each line after ``first`` (default ``indent``) indented by ``indent``."""
        lead = indent if first is None else first
        out.write(
            textwrap.fill(
                text,
                self.width,
                initial_indent=lead,
                subsequent_indent=indent,
                break_on_hyphens=False,
                break_long_words=False,  # a path or a name stays whole, even past the width
            )
            + "\n"
        )

    def formats(self, keys: Sequence[str]) -> str:
        return ", ".join(FORMATS[k].label for k in keys)


def _shortened(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters (an ellipsis where it was cut)."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2 :]


def _table(
    rows: Sequence[Sequence[str]],
    out: TextIO,
    width: int = DEFAULT_WIDTH,
    indent: str = "  ",
    keys: int = 1,
    groups: Sequence[str] | None = None,
) -> None:
    """A header and rows as aligned columns: the first left-aligned, the rest right-aligned. ``groups`` names, per
    column after the first ``keys``, the group it belongs to (a format over its "to 0" and "overflow"), written on a
    line above the header. Wider than ``width``, the table is cut into several of fewer columns, each repeating the
    ``keys`` columns and never cutting a group; a first column longer than two fifths of the width is shortened in
    the middle."""
    rows = [[_shortened(c, max(12, 2 * width // 5)) if i == 0 else c for i, c in enumerate(r)] for r in rows]
    n = len(rows[0])
    named = list(groups) if groups is not None else [str(i) for i in range(keys, n)]
    widths = [max(len(r[i]) for r in rows) for i in range(n)]
    units: list[list[int]] = []  # runs of columns of one group
    for i in range(keys, n):
        if units and named[i - keys] == named[units[-1][0] - keys]:
            units[-1].append(i)
        else:
            units.append([i])
    if groups is not None:  # a group's name must fit over its columns
        for unit in units:
            need = len(named[unit[0] - keys]) - (sum(widths[i] for i in unit) + 2 * (len(unit) - 1))
            if need > 0:
                widths[unit[0]] += need
    room = width - len(indent) - sum(widths[:keys]) - 2 * keys
    chunks: list[list[int]] = [[]]
    used = 0
    for unit in units:
        size = sum(widths[i] + 2 for i in unit)
        if chunks[-1] and used + size > room:
            chunks.append([])
            used = 0
        chunks[-1].extend(unit)
        used += size
    for c, chunk in enumerate(chunks):
        if c:
            out.write("\n")
        columns = [*range(keys), *chunk]
        if groups is not None:
            line, at = [], 0
            pos = sum(widths[i] + 2 for i in range(keys))
            for unit in [u for u in units if u[0] in chunk]:
                line.append(" " * (pos - at) + named[unit[0] - keys])
                at = pos + len(named[unit[0] - keys])
                pos += sum(widths[i] + 2 for i in unit)
            out.write(indent + "".join(line).rstrip() + "\n")
        for j, row in enumerate(rows):
            cells = [row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i]) for i in columns]
            out.write(indent + "  ".join(cells).rstrip() + "\n")
            if j == 0:
                out.write(indent + "  ".join("-" * widths[i] for i in columns) + "\n")


def _error_text(w: _Words, share: float | None, shares: dict[str, Any]) -> str:
    """A mean relative error: ∞ when a value overflowed to inf (None in JSON), — when there were no values."""
    if share is not None:
        return w.pct(share)
    return "∞" if (shares.get("overflow") or 0) > 0 else "—"


def _dtype_words(dtypes: Sequence[str]) -> str:
    from lensa.runstats import measured

    return ", ".join(FORMATS[k].label if (k := measured.format_of_dtype(d)) else d for d in dtypes)


def _write_kind(w: _Words, doc: dict[str, Any], kind: str, out: TextIO) -> None:
    section = doc["kinds"][kind]
    everything = section["all"]
    fmts, labels = doc["formats"], doc["labels"]
    head = w.t(
        "report.kind_head",
        kind=w.kind(kind, True),
        step=w.num(section["step"]),
        n=w.num(everything["nonzero"]),
        layers=w.num(len(section["layers"])),
    )
    out.write("\n")
    w.say(head, out, indent="", first="")
    columns = ("zero", "subnormal", "overflow")
    rows = [[w.t("common.col_format"), *(w.t(f"common.col_{c}") for c in columns), w.t("common.col_error")]]
    scaled = section.get("fp8_scaled") or {}
    marks = _row_marks(w, doc, kind)
    for f in fmts:
        shares = everything["shares"][f]
        label = w.t("report.fp8_raw", fmt=labels[f]) if f in scaled else labels[f]
        if f in marks:  # a format's row that is 0% by construction, or says nothing of a weight: never a bare 0%
            label = w.t("report.trivial_row", fmt=label, mark=marks[f])
        written = w.pcts(shares)
        rows.append([label, *(written[c] for c in columns), _error_text(w, everything["error"][f], shares)])
    for f, shares in scaled.items():
        written = w.pcts(shares)
        rows.append([w.t("report.fp8_scaled", fmt=labels[f]), *(written[c] for c in columns), "—"])
    _table(rows, out, w.width)
    if scaled:
        w.say(w.t("report.fp8_note"), out)
    dtypes = _dtype_words(section["dtypes"])
    if section.get("trivial"):
        trivial = w.formats(section["trivial"])
        w.say(w.t("report.trivial", dtypes=dtypes, formats=trivial, mark=w.t("report.trivial_mark")), out)
    if kind == "update" and marks:
        w.say(w.t("report.update_rows", dtypes=dtypes, mark=w.t("report.update_alone_mark")), out)
        u = doc["updates"]
        for f in marks if u["intended"] else ():
            if u["lost"].get(f) is not None:
                w.say(w.t("report.update_lost", fmt=labels[f], lost=w.pct(u["lost"][f]), step=w.num(u["step"])), out)
    out.write("\n")
    rows = [
        [
            w.t("data.col_layer"),
            w.t("report.col_values"),
            *(w.t(f"report.col_{c}") for _ in fmts for c in ("to_zero", "over")),
        ]
    ]
    for layer in section["layers"]:
        cells = [w.pct(layer["shares"][f][c]) for f in fmts for c in ("zero", "overflow")]
        rows.append([layer["name"], w.num(layer["nonzero"]), *cells])
    raw = {f: w.t("report.fp8_raw", fmt=labels[f]) if f in scaled else labels[f] for f in fmts}
    _table(rows, out, w.width, keys=2, groups=[raw[f] for f in fmts for _ in range(2)])


def _weight_formats(doc: dict[str, Any]) -> list[str]:
    """The report's formats the weights were held in, where their updates were recorded and the file says their types
    (an FP32 weight's format is none of them)."""
    from lensa.runstats import measured

    section = doc["kinds"].get("update")
    if section is None or doc["updates"] is None:
        return []
    held = {measured.format_of_dtype(d) for d in section["dtypes"]}
    return [f for f in doc["formats"] if f in held]


def _row_marks(w: _Words, doc: dict[str, Any], kind: str) -> dict[str, str]:
    """The formats whose rows of ``kind``'s table are marked, with the mark: a format that holds every value of the
    tensors' types exactly (0% by construction); for updates, the format the weights were held in, whose row holds
    each update alone (its 0% to 0 says nothing of what such a weight keeps: that is the updates' own table)."""
    marks = dict.fromkeys(doc["kinds"][kind].get("trivial") or [], w.t("report.trivial_mark"))
    if kind == "update":
        marks.update(dict.fromkeys(_weight_formats(doc), w.t("report.update_alone_mark")))
    return marks


def _write_recipes(w: _Words, doc: dict[str, Any], kind: str, out: TextIO) -> None:
    """Every block recipe on the kind's layers (each with its own scales), then which recipes fit how many layers."""
    from lensa.runstats import measured

    section = doc["kinds"][kind]
    totals = section.get("recipes")
    if not totals:
        return
    out.write("\n")
    w.say(w.t("report.recipes_head", kind=w.kind(kind), step=w.num(section["step"])), out, indent="", first="")
    rows = [
        [
            w.t("recipes.col_recipe"),
            w.t("recipes.col_flushed"),
            w.t("recipes.col_saturated"),
            w.t("report.col_lowest_sqnr"),
            w.t("report.col_fit"),
        ]
    ]
    for key, total in totals.items():
        fit = w.t("report.fit_cell", fit=w.num(total["fitting"]), n=w.num(total["layers"]))
        rows.append([key, w.pct(total["flushed"]), w.pct(total["saturated"]), w.db(total["sqnr_db"]), fit])
    _table(rows, out, w.width)
    w.say(
        w.t(
            "report.recipes_note",
            flushed=w.pct(measured.MAX_FLUSHED),
            saturated=w.pct(measured.MAX_SATURATED),
            sqnr=w.db(measured.MIN_SQNR_DB),
        ),
        out,
    )


def _write_scale(w: _Words, doc: dict[str, Any], kind: str, out: TextIO) -> None:
    b = doc["loss_scale"][kind]
    words = w.kind(kind)
    keep, safe = w.scale(b["keep_k"]), w.scale(b["safe_k"])
    if b["keep_k"] is None and b["safe_k"] is None:
        sentence = w.t("loss_scaling_data.bounds_empty", kind=words)
    elif b["safe_k"] is None:
        sentence = w.t("loss_scaling_data.bounds_no_safe", kind=words, keep=keep)
    elif b["keep_k"] is None:
        sentence = w.t("loss_scaling_data.bounds_no_keep", kind=words, safe=safe)
    else:
        key = "bounds_one" if b["keep_k"] == b["safe_k"] else "bounds_window" if b["window"] else "bounds_clash"
        sentence = w.t(f"loss_scaling_data.{key}", kind=words, keep=keep, safe=safe)
    out.write("\n")
    w.say(w.t("report.scale_head", kind=w.kind(kind, True), step=w.num(b["step"])), out, indent="", first="")
    w.say(sentence, out)
    scales = "; ".join(f"{doc['labels'][f]} {w.scale(k)}" for f, k in b["safe_k_by_format"].items())
    w.say(w.t("report.fp8_scales", scales=scales), out)


def _write_updates(w: _Words, doc: dict[str, Any], out: TextIO) -> None:
    u = doc["updates"]
    fmts, labels = doc["formats"], doc["labels"]
    out.write("\n")
    key = "report.updates_head_intended" if u.get("intended") else "report.updates_head"
    w.say(w.t(key, step=w.num(u["step"]), n=w.num(u["nonzero"])), out, indent="", first="")
    rows = [[w.t("data.col_layer"), w.t("report.col_values"), *(labels[f] for f in fmts)]]
    if u["lost"]:
        rows.append([w.t("data.layer_all"), w.num(u["nonzero"]), *(w.pct(u["lost"][f]) for f in fmts)])
    for r in u["layers"]:
        rows.append([r["name"], w.num(r["nonzero"]), *(w.pct(r["lost"][f]) for f in fmts)])
    _table(rows, out, w.width, keys=2)
    if u.get("intended"):
        dtypes = _dtype_words(u.get("dtypes") or [])
        w.say(w.t("report.intended", dtypes=dtypes, fp32=w.pct(u.get("fp32_lost"))), out)
    elif hidden := _weight_formats(doc):  # after − before of narrow weights: what they rounded away is 0, uncounted
        dtypes = _dtype_words(u.get("dtypes") or [])
        w.say(w.t("report.update_hidden", dtypes=dtypes, formats=w.formats(hidden)), out)
    losing = u["losing"]["fp16"]
    sentence = w.t("report.losing", layers=", ".join(losing)) if losing else w.t("report.losing_none")
    w.say(sentence, out)


def _write_verdicts(w: _Words, doc: dict[str, Any], out: TextIO) -> None:
    out.write("\n" + w.t("report.verdict_head") + "\n")
    for kind, verdict in doc["fp16_against_bf16"].items():
        everything = doc["kinds"][kind]["all"]
        shares, errors = everything["shares"], everything["error"]
        values = {
            "kind": w.kind(kind),
            "z16": w.pct(shares["fp16"]["zero"]),
            "zbf": w.pct(shares["bf16"]["zero"]),
            "e16": _error_text(w, errors["fp16"], shares["fp16"]),
            "ebf": _error_text(w, errors["bf16"], shares["bf16"]),
            "over": w.pct(shares["fp16"]["overflow"]),
        }
        w.say(w.t(f"bf16_data.explain_{verdict}", **values), out)


def _arms_named(doc: dict[str, Any]) -> bool:
    """Whether the file's arms have names of their own (a run's meta says its arm), not only their place."""
    return len(doc["arms"]) > 1 or str(doc["arm"]) != "0"


def write_text(doc: dict[str, Any], lang: str, out: TextIO, width: int = DEFAULT_WIDTH) -> None:
    """The report as the terminal shows it, in ``lang``, fitted to ``width`` columns."""
    w = _Words(lang, width)
    w.say(w.t("report.title", file=doc["file"]), out, indent="", first="")
    if _arms_named(doc):
        w.say(w.t("report.arm", arm=doc["arm"], arms=", ".join(doc["arms"])), out, indent="", first="")
    w.say(w.t("report.shares"), out, indent="", first="")
    if doc.get("ranks"):
        w.say(w.t("report.ranks", n=w.num(doc["ranks"])), out, indent="", first="")
    plan = doc.get("recorder")
    if isinstance(plan, dict) and plan.get("records_per_step"):
        values = {
            "budget": w.num(plan.get("budget", 0)),
            "steps": w.num(len(plan.get("steps") or [])),
            "planned": w.num(plan.get("steps_planned") or len(plan.get("steps") or [])),
            "params": w.num((plan.get("parameters") or [0, 0])[0]),
            "all_params": w.num((plan.get("parameters") or [0, 0])[1]),
            "modules": w.num((plan.get("modules") or [0, 0])[0]),
            "all_modules": w.num((plan.get("modules") or [0, 0])[1]),
        }
        w.say(w.t("report.plan", **values), out, indent="", first="")
    for kind in doc["kinds"]:
        _write_kind(w, doc, kind, out)
        _write_recipes(w, doc, kind, out)
    for kind in doc["loss_scale"]:
        _write_scale(w, doc, kind, out)
    history = doc["scaler_history"]
    out.write("\n")
    if history is None:
        w.say(w.t("report.history_none"), out, indent="", first="")
    else:
        values = {
            "start": w.scale(history["first_k"]),
            "end": w.scale(history["last_k"]),
            "skipped": w.num(len(history["skipped_steps"])),
            "n": w.num(history["steps"]),
        }
        w.say(w.t("loss_scaling_data.explain_run", **values), out, indent="", first="")
    if doc["updates"] is not None:
        _write_updates(w, doc, out)
    if doc["fp16_against_bf16"]:
        _write_verdicts(w, doc, out)


def _check_json(result: R.CheckResult, loss_scaling: bool) -> dict[str, Any]:
    return {
        "format": result.fmt,
        "threshold": result.threshold,
        "loss_scaling": loss_scaling,
        "passed": result.passed,
        "items": [
            {
                "kind": i.kind,
                "step": i.step,
                "share": i.share,
                "scale_k": i.scale_k,
                "how": i.how,
                "trivial": i.trivial,
                "sqnr_db": R._num(i.sqnr_db) if i.sqnr_db is not None else None,
                "passed": not i.fails(result.threshold),
            }
            for i in result.items
        ],
    }


def _checked_label(fmt: str) -> str:
    return FORMATS[fmt].label if fmt in FORMATS else f"{RECIPES[fmt].label} ({fmt})"


def write_check(
    result: R.CheckResult, kinds: Sequence[str], lang: str, out: TextIO, width: int = DEFAULT_WIDTH
) -> None:
    w = _Words(lang, width)
    label = _checked_label(result.fmt)
    threshold = w.pct(result.threshold)
    out.write("\n")
    if not result.items:
        w.say(w.t("report.check_none", fmt=label, kinds=", ".join(w.kind(k) for k in kinds)), out, "", "")
        return
    failed = result.failed
    if len(failed) == 1:
        w.say(w.t("report.check_fail_one", fmt=label, threshold=threshold), out, "", "")
    elif failed:
        w.say(w.t("report.check_fail", fmt=label, count=w.num(len(failed)), threshold=threshold), out, "", "")
    else:
        w.say(w.t("report.check_pass", fmt=label, threshold=threshold), out, "", "")
    for i in result.items:
        mark = "✗" if i in failed else "✓"
        common = {"mark": mark, "kind": w.kind(i.kind, True), "step": w.num(i.step), "share": w.pct(i.share)}
        if i.how == "recipe":
            sqnr = w.db(R._num(i.sqnr_db) if i.sqnr_db is not None else None)
            line = w.t("report.check_line_recipe", sqnr=sqnr, least=w.db(i.min_sqnr_db), **common)
        elif i.kind == "update":
            line = w.t("report.check_line_update", fmt=label, **common)
        elif i.how in ("per_tensor", "raw"):
            line = w.t(f"report.check_line_{i.how}", **common)
        else:
            scaled = w.t("report.check_scaled", s=i18n.power_of_two(i.scale_k)) if i.scale_k else ""
            line = w.t("report.check_line", scaled=scaled, **common)
        w.say(line, out, indent="    ")
        if i.trivial:
            w.say(w.t("report.check_trivial", kind=w.kind(i.kind), fmt=label), out, indent="    ")


def _share(text: str) -> float:
    try:
        value = float(text.strip().rstrip("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a share: {text!r} (write 0.001 or 0.1%)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share lies between 0 and 1 (0% and 100%), not {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lensa", description="Lensa · Mixed Precision, without a browser.")
    commands = parser.add_subparsers(dest="command", required=True)
    rep = commands.add_parser(
        "report",
        help="the lesson's verdict on a run recorded with lensa.live.capture.Recorder",
        description="Per kind and layer, the shares each format rounds to 0 or overflows; every block recipe; the "
        "useful loss-scale band; the layers whose updates FP16 weights would lose; FP16 against BF16. The numbers "
        "are the ones steps 2-5 show for the same file.",
    )
    rep.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="a .npz file written by Recorder.save (or a Trainer / Lightning LensaCallback); several, or a folder "
        "of them: the arms of one run",
    )
    rep.add_argument("--json", action="store_true", help="print one JSON document (schema: docs/report.md)")
    rep.add_argument("--html", metavar="OUT", help="also write one self-contained HTML file: the report and its charts")
    rep.add_argument("--step", type=int, help="report every kind at this recorded step (default: each kind's last)")
    rep.add_argument(
        "--lang", choices=i18n.LANGUAGES, help="language of the text (default: English; id for an id locale)"
    )
    rep.add_argument("--width", type=int, help="columns of the text (default: the terminal's)")
    rep.add_argument(
        "--check",
        choices=R.CHECKABLE,
        metavar="FORMAT_OR_RECIPE",
        help=f"exit 1 when this format or block recipe would lose more than --threshold ({', '.join(R.CHECKABLE)})",
    )
    rep.add_argument(
        "--threshold",
        type=_share,
        default=R.DEFAULT_THRESHOLD,
        help="the share of non-zero values a checked kind may lose (default 0.001, i.e. 0.1%%)",
    )
    rep.add_argument(
        "--min-sqnr",
        type=float,
        default=R.DEFAULT_MIN_SQNR_DB,
        help="the lowest SQNR in dB a checked block recipe may give a layer (default 25)",
    )
    rep.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        default=list(R.CHECKED_KINDS),
        help="the kinds --check reads (default: all but update, which an FP32 master copy keeps)",
    )
    rep.add_argument(
        "--no-loss-scale",
        action="store_true",
        help="check gradients as recorded, without the loss scale nearest 1 inside the format's useful band "
        "(and FP8 as the raw cast, without a scale per tensor)",
    )
    merge = commands.add_parser(
        "merge",
        help="one run from the per-rank files of a distributed run",
        description="Activations and their gradients are combined over the files (counts and sums add); weights, "
        "their gradients and updates are kept once, from the first file that has them; each step's loss is the "
        "mean. Recorder.save and the callbacks write one file already: this is for per-rank files. Files that "
        "cannot be the ranks of one run (a file twice, other training or recorded steps, other weights, another "
        "number of ranks or arm) are refused with exit code 2, and nothing is written.",
    )
    merge.add_argument("out", help="the .npz file to write")
    merge.add_argument("files", nargs="+", metavar="FILE", help="the per-rank .npz files (rank 0's first)")
    merge.add_argument(
        "--lang", choices=i18n.LANGUAGES, help="language of the messages (default: English; id for an id locale)"
    )
    return parser


def _read(paths: Sequence[str], w: _Words, err: TextIO, whole_paths: bool = False) -> list[tuple[str, RunStats]] | None:
    """Each file (a folder: each .npz in it, by name) read, with its name (``whole_paths``: its path); None after
    saying why one could not be."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            inside = sorted(str(p) for p in Path(path).glob("*.npz"))
            if not inside:
                err.write(w.t("report.no_runs", name=path) + "\n")
                return None
            files += inside
        else:
            files.append(path)
    runs = []
    for path in files:
        name = path if whole_paths else os.path.basename(path)
        try:
            runs.append((name, load(path)))
        except RunStatsError as e:
            err.write(w.t("data.upload_error", name=name, detail=str(e)) + "\n")
            return None
        except OSError as e:
            err.write(w.t("report.no_file", name=path, detail=e.strerror or str(e)) + "\n")
            return None
    return runs


def _arms(runs: list[tuple[str, RunStats]]) -> RunStats | dict[str, RunStats]:
    """One run, or several as arms: each by its meta's arm, else by its file's name."""
    if len(runs) == 1:
        return runs[0][1]
    arms: dict[str, RunStats] = {}
    for name, run in runs:
        arm = str(run.meta.get("arm", Path(name).stem))
        while arm in arms:
            arm = f"{arm} ({Path(name).stem})" if Path(name).stem not in arm else arm + "'"
        arms[arm] = run
    return arms


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _not_one_run(w: _Words, e: NotOneRunError, names: Sequence[str]) -> str:
    """Why ``e`` says the files cannot be the ranks of one run, in ``w``'s language, the files by their names."""
    v: dict[str, object] = dict(e.values)
    v.update(zip(("a", "b"), (names[i] for i in e.parts), strict=False))
    for key in ("step", "n", "ranks", "ranks_a", "ranks_b", "size_a", "size_b"):
        value = v.get(key)
        if isinstance(value, int):
            v[key] = w.num(value)
    for key in ("dtype_a", "dtype_b"):
        if key in v:
            v[key] = _dtype_words([str(v[key])]) if v[key] is not None else w.t("report.dtype_unknown")
    if "kind" in v:
        v["kind"] = w.kind(str(v["kind"]))
    if "name" in v:
        v["tensor"] = v.pop("name")
    sentences = {
        "ranks": "report.why_ranks",
        "ranks_one": "report.why_ranks_one",
        "too_many": "report.why_too_many",
        "steps": "report.why_steps",
        "recorded": "report.why_recorded",
        "arm": "report.why_arm",
        "shared_missing": "report.why_shared_missing",
        "shared_size": "report.why_shared_size",
        "shared_values": "report.why_shared_values",
        "dtype": "report.why_dtype",
        "same_records": "report.why_same_records",
    }
    reason = "ranks_one" if e.reason == "ranks" and e.values.get("ranks_b") is None else e.reason
    return w.t(sentences[reason], **v)


def _merge(args: argparse.Namespace, w: _Words, out: TextIO, err: TextIO) -> int:
    runs = _read(args.files, w, err, whole_paths=True)
    if runs is None:
        return EXIT_BAD_INPUT
    names = [name for name, _ in runs]
    # Checked before anything is written: files that cannot be the ranks of one run leave no file behind.
    twice = next((a for i, a in enumerate(names) if any(_same_file(a, b) for b in names[:i])), None)
    if twice is not None:
        err.write(w.t("report.not_one_run", name=args.out, why=w.t("report.why_same_file", a=twice)) + "\n")
        return EXIT_BAD_INPUT
    try:
        check_one_run([run for _, run in runs])
    except NotOneRunError as e:
        err.write(w.t("report.not_one_run", name=args.out, why=_not_one_run(w, e, names)) + "\n")
        return EXIT_BAD_INPUT
    try:
        merged = merge_ranks([run for _, run in runs])
        merged.save(args.out)
    except (ValueError, OSError) as e:
        err.write(w.t("report.merge_failed", name=args.out, detail=str(e)) + "\n")
        return EXIT_BAD_INPUT
    out.write(w.t("report.merged", path=args.out, n=w.num(len(runs)), tensors=w.num(len(merged))) + "\n")
    return EXIT_OK


def _report(args: argparse.Namespace, w: _Words, out: TextIO, err: TextIO) -> int:
    runs = _read(args.files, w, err)
    if runs is None:
        return EXIT_BAD_INPUT
    arms = _arms(runs)
    name = ", ".join(n for n, _ in runs)
    try:
        doc = R.build(arms, step=args.step, name=name)
    except ValueError:
        every = [r for _, r in runs]
        steps = sorted({s for run in every for k in run.kinds() for s in run.steps(k)})
        err.write(w.t("report.bad_step", step=args.step, file=name, steps=", ".join(map(str, steps))) + "\n")
        return EXIT_BAD_INPUT
    result = None
    if args.check:
        scaling = not args.no_loss_scale
        try:
            result = R.check(arms, args.check, args.threshold, args.kinds, scaling, args.step, args.min_sqnr)
        except ValueError:
            err.write(w.t("report.check_no_recipes", file=name, recipe=args.check) + "\n")
            return EXIT_BAD_INPUT
    # Known before a word is written: a reader that closes the pipe early still gets the check's exit code.
    args.exit_code = EXIT_CHECK_FAILED if result is not None and not result.passed else EXIT_OK
    if args.html:
        try:
            from lensa.ui import report_html  # plotly: the app's extra

            text = io.StringIO()
            write_text(doc, w.lang, text, width=110)
            if result is not None:
                write_check(result, args.kinds, w.lang, text, width=110)
            report_html.write(doc, arms, w.lang, args.html, text.getvalue())
        except ImportError as e:
            err.write(w.t("report.html_needs_plotly", detail=str(e)) + "\n")
            return EXIT_BAD_INPUT
        except OSError as e:
            err.write(w.t("report.no_file", name=args.html, detail=e.strerror or str(e)) + "\n")
            return EXIT_BAD_INPUT
    if args.json:
        if result is not None:
            doc["check"] = _check_json(result, not args.no_loss_scale)
        out.write(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        write_text(doc, w.lang, out, w.width)
        if result is not None:
            write_check(result, args.kinds, w.lang, out, w.width)
        if args.html:
            out.write("\n")
            w.say(w.t("report.html_written", path=args.html), out, indent="", first="")
    return int(args.exit_code)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; returns the exit code (0, 1 for a failed check, 2 for bad input)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed why
        return EXIT_BAD_INPUT if e.code not in (0, None) else EXIT_OK
    w = _Words(_language(getattr(args, "lang", None)), _width(getattr(args, "width", None)))
    code = EXIT_OK
    try:
        code = _merge(args, w, out, err) if args.command == "merge" else _report(args, w, out, err)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): what it read was all it wanted. Python's own flush at exit would fail
        # again on the same pipe, so point stdout at nothing first; the exit code stays the check's.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
        code = int(getattr(args, "exit_code", EXIT_OK))
    return code


if __name__ == "__main__":
    sys.exit(main())
