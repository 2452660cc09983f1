"""Format inspector: one number, as every format of lensa.numerics.formats.FORMATS stores it (FP32 down to FP4 and the
E8M0 scale), bit by bit."""

import streamlit as st

from lensa.numerics import exact, inspector
from lensa.ui import injected, layout, url_state, widgets
from lensa.ui.frame import safe_echo, setup

page = setup("formats")
st.title(page.t("title"))
st.markdown(f"#### {page.t('headline')}")
st.markdown(page.t("intro"))


def canonical(typed: str) -> str | None:
    """The link's spelling of a number typed the page's language's way (Indonesian 65.504 is x=65504)."""
    try:
        return exact.parse_local(typed, page.lang).canonical
    except exact.ParseError:
        return None


text = widgets.text(
    page,
    "x",
    page.t("input"),
    help=page.t("input_help"),
    placeholder=exact.local_text("0.1", page.lang),
    read=canonical,
    write=lambda x: exact.local_text(x, page.lang),
)
layout.after_controls(page)


def flip(report: inspector.FormatReport, field: inspector.FieldBits, widget: str) -> None:
    """Pill callback: the pills that changed are bits to flip; the new value goes back into the text box.

    Pill ``i`` of a field shows the character ``i`` of its bits (the pills run from the field's top bit down).
    """
    toggled = set(field.set_positions).symmetric_difference(st.session_state.get(widget) or [])
    value = inspector.flip_bits(report, None, field.bit_numbers(toggled))
    st.session_state[url_state.widget_key(page, "x")] = exact.local_text(exact.canonical_text(value), page.lang)


try:
    local = exact.parse_local(text, page.lang)
except exact.ParseError:
    st.error(page.t("parse_error", raw=safe_echo(text, 40)), icon=":material/error:")
    st.stop()
parsed = local.parsed

reports = inspector.inspect_all(parsed)
if parsed.out_of_range:
    st.info(page.t(f"out_of_range_{parsed.out_of_range}"), icon=":material/info:")
st.caption(page.t("typed", value=safe_echo(parsed.text, 60)))
if local.note is not None:  # a mark or an exponent the learner may have meant otherwise: say how it was read
    st.caption(page.t(f"read_{local.note}", typed=safe_echo(parsed.text, 60), reading=local.reading))


def category(report: inspector.FormatReport) -> str:
    if report.no_nan:
        return page.t("no_nan")
    return page.t(f"category.{report.category}") if report.category != "nan" else page.t("common.nan")


def decimal(text: str) -> str:
    """An exact decimal from lensa.numerics.exact, with the language's decimal mark."""
    return text.replace(".", ",") if page.lang == "id" else text


def neighbour(x: float | None) -> str:
    return "—" if x is None else decimal(exact.exact_decimal(x))


st.html(injected.INSPECTOR_STYLE)
with st.container(key="lensa-inspector-table"):  # a static table that wraps: a grid would clip FP32's value
    st.table(
        [
            {
                page.t("col_format"): r.label,
                page.t("col_stored"): "—" if r.no_nan else decimal(r.stored_exact),
                page.t("col_category"): category(r),
                page.t("col_error"): "—" if r.relative_error != r.relative_error else page.sci(r.relative_error, 3),
                page.t("col_exponent"): "—" if r.exponent is None else page.num(r.exponent),
                page.t("col_bits"): "—" if r.no_nan else r.bit_string,  # FP6's and FP4's NaN has no code
            }
            for r in reports
        ],
        hide_index=True,
    )
st.caption(page.t("legend"))
st.caption(page.t("formats_mx.legend"))
st.markdown(page.t("flip_hint"))

for r in reports:
    with st.container(border=True):
        st.markdown(f"**{r.label}** · {page.t('common.bits', n=r.fmt.bits)} · {category(r)}")
        if r.no_nan:  # no code to show or flip: say what a real cast gives instead
            cast = inspector.nan_cast(r.fmt)
            st.markdown(page.t("no_nan_cast", value=f"`{decimal(cast.stored_exact)}`", bits=f"`{cast.bit_string}`"))
            continue
        st.markdown(
            f"`{decimal(r.stored_exact)}`  \n"
            + " ".join(
                f":{colour}[{bits}]"
                for colour, bits in (("violet", r.sign_str), ("blue", r.exponent_str), ("orange", r.significand_str))
                if bits  # E8M0 has no sign and no significand bits
            )
            + f" · {r.code_hex}"
        )
        for field in inspector.field_bits(r):  # one row per field: rows wrap on a narrow screen, columns would clip
            if not field.bits:
                continue  # E8M0 has no sign and no significand bits
            key = f"bits.{r.name}.{field.name}.{r.code}"
            top, bottom = field.numbers[0], field.numbers[-1]
            st.pills(
                page.t(f"field_{field.name}")
                + " · "
                + (page.t("field_bit", n=top) if top == bottom else page.t("field_bits", top=top, bottom=bottom)),
                list(range(len(field.bits))),
                selection_mode="multi",
                default=field.set_positions,
                # The bit's value, its number in small print after it: labels must differ (a pill is known by
                # its label), and a screen reader or a hover still has the position.
                format_func=lambda i, labels=field.labels: labels[i],
                key=key,
                on_change=flip,
                args=(r, field, key),
            )
        details = page.t(
            "details",
            below=neighbour(r.below),
            above=neighbour(r.above),
            gap_below="—" if r.gap_below is None else page.sci(r.gap_below, 3),
            gap_above="—" if r.gap_above is None else page.sci(r.gap_above, 3),
        )
        st.caption(details)

layout.notes(
    page,
    page.t("notes") + "\n" + page.t("formats_mx.notes"),
    [page.t("refs.ieee754"), page.t("refs.fp8"), page.t("refs.kalamkar"), page.t("refs.ocp_mx")],
)
