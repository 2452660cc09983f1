"""``python -m lensa report RUN.npz`` (or ``lensa report RUN.npz``): the lesson's verdict on a recorded run, no browser.

::

    lensa report run.npz                       # tables and sentences, in the terminal's language (en or id)
    lensa report run.npz --json                # the same as one JSON document (docs/report.md: its schema)
    lensa report run.npz --check fp16          # exit 1 if FP16 would lose more than 0.1% of a checked kind

Exit codes: 0 done (and every check passed), 1 a check failed, 2 the file could not be read or the arguments
are wrong (the message says which). The numbers are :mod:`lensa.report`'s, which are the pages' own; the text
comes from the same catalogues as the pages (``lensa/text``), in ``--lang``, else the language of the
``LC_ALL`` / ``LC_MESSAGES`` / ``LANG`` locale (``id*`` gives Indonesian, any other English), else
Indonesian, as the app chooses.

This module imports numpy and the core only: no streamlit, no plotly, no torch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from lensa import report as R
from lensa.formats import FORMATS
from lensa.runstats import KINDS, RunStatsError, load
from lensa.ui import i18n

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _language(requested: str | None) -> str:
    locale = next((os.environ[v] for v in ("LC_ALL", "LC_MESSAGES", "LANG") if os.environ.get(v)), None)
    if locale and locale.split(".")[0].upper() in ("C", "POSIX"):
        locale = None  # no language in it
    return i18n.choose_language(requested, None, locale)


class _Words:
    """Text and numbers in one language, written as the pages write them (plain text: Markdown marks dropped)."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def t(self, key: str, **values: object) -> str:
        return i18n.text(self.lang, key, **values).replace("**", "").replace("*", "")

    def pct(self, share: float | None, nan_text: str = "—") -> str:
        """A share as the pages' ``data.pct`` writes it: — for no values, ∞ for an overflow (None in JSON)."""
        return nan_text if share is None else i18n.percent(share, self.lang)

    def num(self, x: float) -> str:
        return i18n.number(x, self.lang)

    def kind(self, kind: str, capital: bool = False) -> str:
        words = self.t(f"data.kind_{kind}")
        return words[:1].upper() + words[1:] if capital else words

    def scale(self, k: int | None) -> str:
        return "—" if k is None else i18n.power_of_two(k)


def _table(rows: Sequence[Sequence[str]], out: TextIO, indent: str = "  ") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        out.write(indent + "  ".join(cells).rstrip() + "\n")
        if j == 0:
            out.write(indent + "  ".join("-" * w for w in widths) + "\n")


def _error_text(w: _Words, share: float | None, shares: dict[str, Any]) -> str:
    """A mean relative error: ∞ when a value overflowed to inf (None in JSON), — when there were no values."""
    if share is not None:
        return w.pct(share)
    return "∞" if (shares.get("overflow") or 0) > 0 else "—"


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
    out.write("\n" + head + "\n")
    columns = ("zero", "subnormal", "overflow")
    rows = [[w.t("common.col_format"), *(w.t(f"common.col_{c}") for c in columns), w.t("common.col_error")]]
    for f in fmts:
        shares = everything["shares"][f]
        rows.append([labels[f], *(w.pct(shares[c]) for c in columns), _error_text(w, everything["error"][f], shares)])
    _table(rows, out)
    out.write("\n")
    rows = [
        [
            w.t("data.col_layer"),
            w.t("report.col_values"),
            *(w.t(f"report.col_{c}", fmt=labels[f]) for f in fmts for c in ("to_zero", "over")),
        ]
    ]
    for layer in section["layers"]:
        cells = [w.pct(layer["shares"][f][c]) for f in fmts for c in ("zero", "overflow")]
        rows.append([layer["name"], w.num(layer["nonzero"]), *cells])
    _table(rows, out)


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
        key = "bounds_window" if b["window"] else "bounds_clash"
        sentence = w.t(f"loss_scaling_data.{key}", kind=words, keep=keep, safe=safe)
    head = w.t("report.scale_head", kind=w.kind(kind, True), step=w.num(b["step"]))
    out.write("\n" + head + "\n  " + sentence + "\n")
    scales = "; ".join(f"{doc['labels'][f]} {w.scale(k)}" for f, k in b["safe_k_by_format"].items())
    out.write("  " + w.t("report.fp8_scales", scales=scales) + "\n")


def _write_updates(w: _Words, doc: dict[str, Any], out: TextIO) -> None:
    u = doc["updates"]
    fmts, labels = doc["formats"], doc["labels"]
    out.write("\n" + w.t("report.updates_head", step=w.num(u["step"]), n=w.num(u["nonzero"])) + "\n")
    rows = [[w.t("data.col_layer"), w.t("report.col_values"), *(labels[f] for f in fmts)]]
    if u["lost"]:
        rows.append([w.t("data.layer_all"), w.num(u["nonzero"]), *(w.pct(u["lost"][f]) for f in fmts)])
    for r in u["layers"]:
        rows.append([r["name"], w.num(r["nonzero"]), *(w.pct(r["lost"][f]) for f in fmts)])
    _table(rows, out)
    losing = u["losing"]["fp16"]
    sentence = w.t("report.losing", layers=", ".join(losing)) if losing else w.t("report.losing_none")
    out.write("  " + sentence + "\n")


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
        out.write("  " + w.t(f"bf16_data.explain_{verdict}", **values) + "\n")


def write_text(doc: dict[str, Any], lang: str, out: TextIO) -> None:
    """The report as the terminal shows it, in ``lang``."""
    w = _Words(lang)
    out.write(w.t("report.title", file=doc["file"]) + "\n")
    out.write(w.t("report.arm", arm=doc["arm"], arms=", ".join(doc["arms"])) + "\n")
    for kind in doc["kinds"]:
        _write_kind(w, doc, kind, out)
    for kind in doc["loss_scale"]:
        _write_scale(w, doc, kind, out)
    history = doc["scaler_history"]
    out.write("\n")
    if history is None:
        out.write(w.t("report.history_none") + "\n")
    else:
        values = {
            "start": w.scale(history["first_k"]),
            "end": w.scale(history["last_k"]),
            "skipped": w.num(len(history["skipped_steps"])),
            "n": w.num(history["steps"]),
        }
        out.write(w.t("loss_scaling_data.explain_run", **values) + "\n")
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
        "items": [{"kind": i.kind, "step": i.step, "share": i.share, "scale_k": i.scale_k} for i in result.items],
    }


def write_check(result: R.CheckResult, kinds: Sequence[str], lang: str, out: TextIO) -> None:
    w = _Words(lang)
    label = FORMATS[result.fmt].label
    threshold = w.pct(result.threshold)
    out.write("\n")
    if not result.items:
        out.write(w.t("report.check_none", fmt=label, kinds=", ".join(w.kind(k) for k in kinds)) + "\n")
        return
    failed = [i for i in result.items if i.share is not None and i.share > result.threshold]
    if failed:
        out.write(w.t("report.check_fail", fmt=label, count=w.num(len(failed)), threshold=threshold) + "\n")
    else:
        out.write(w.t("report.check_pass", fmt=label, threshold=threshold) + "\n")
    for i in result.items:
        mark = "✗" if i in failed else "✓"
        common = {"mark": mark, "kind": w.kind(i.kind, True), "step": w.num(i.step), "share": w.pct(i.share)}
        if i.kind == "update":
            out.write("  " + w.t("report.check_line_update", fmt=label, **common) + "\n")
        else:
            scaled = w.t("report.check_scaled", s=i18n.power_of_two(i.scale_k)) if i.scale_k else ""
            out.write("  " + w.t("report.check_line", scaled=scaled, **common) + "\n")


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
        description="Per kind and layer, the shares each format rounds to 0 or overflows; the useful loss-scale "
        "band; the layers whose updates FP16 weights would lose; FP16 against BF16. The numbers are the ones "
        "steps 2-5 show for the same file.",
    )
    rep.add_argument("file", help="a .npz file written by Recorder.save (or a Trainer / Lightning LensaCallback)")
    rep.add_argument("--json", action="store_true", help="print one JSON document (schema: docs/report.md)")
    rep.add_argument("--step", type=int, help="report every kind at this recorded step (default: each kind's last)")
    rep.add_argument("--lang", choices=i18n.LANGUAGES, help="language of the text (default: from the locale)")
    rep.add_argument(
        "--check", choices=R.REPORT_FORMATS, help="exit 1 when this format would lose more than --threshold"
    )
    rep.add_argument(
        "--threshold",
        type=_share,
        default=R.DEFAULT_THRESHOLD,
        help="the share of non-zero values a checked kind may lose (default 0.001, i.e. 0.1%%)",
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
        help="check gradients as recorded, without the loss scale nearest 1 inside the format's useful band",
    )
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; returns the exit code (0, 1 for a failed check, 2 for bad input)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed why
        return EXIT_BAD_INPUT if e.code not in (0, None) else EXIT_OK
    lang = _language(args.lang)
    w = _Words(lang)
    name = os.path.basename(args.file)
    try:
        run = load(args.file)
    except RunStatsError as e:
        err.write(w.t("data.upload_error", name=name, detail=str(e)) + "\n")
        return EXIT_BAD_INPUT
    except OSError as e:
        err.write(w.t("report.no_file", name=args.file, detail=e.strerror or str(e)) + "\n")
        return EXIT_BAD_INPUT
    try:
        doc = R.build(run, step=args.step, name=name)
    except ValueError:
        steps = sorted({s for k in run.kinds() for s in run.steps(k)})
        err.write(w.t("report.bad_step", step=args.step, file=name, steps=", ".join(map(str, steps))) + "\n")
        return EXIT_BAD_INPUT
    result = None
    if args.check:
        result = R.check(run, args.check, args.threshold, args.kinds, not args.no_loss_scale, args.step)
    if args.json:
        if result is not None:
            doc["check"] = _check_json(result, not args.no_loss_scale)
        out.write(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        write_text(doc, lang, out)
        if result is not None:
            write_check(result, args.kinds, lang, out)
    return EXIT_CHECK_FAILED if result is not None and not result.passed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
