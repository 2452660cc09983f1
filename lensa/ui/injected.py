"""What the app injects into the browser page: the script and styles Streamlit has no API for.

:func:`page_extras` runs on every full run of a page; :data:`METRIC_STYLE` is drawn by
:func:`lensa.ui.frame.setup` on every page.
"""

from __future__ import annotations

import json

import streamlit as st

# Containers (st.container(key=...)) that stay off paper: the questions, the step's links, the footer, the
# print view's own bar. Streamlit gives each the class st-key-<key>.
NOT_ON_PAPER = ("lensa-quiz", "lensa-tools", "lensa-footer", "lensa-print-bar")

# Metric labels wrap instead of being cut off ("Mean relative error FP16" in a quarter row).
METRIC_STYLE = """<style>
[data-testid="stMetricLabel"] p, [data-testid="stMetricLabel"] div {
    white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
</style>"""
# The format inspector's table (st.table in a container keyed lensa-inspector-table): the exact value and the bits
# wrap anywhere, so FP32's stay whole at 1280 px and the table fits a 390 px phone instead of running off it.
INSPECTOR_STYLE = """<style>
.st-key-lensa-inspector-table table { width: 100%; table-layout: auto; }
.st-key-lensa-inspector-table :is(th, td) { padding: 0.25rem 0.4rem !important; }
.st-key-lensa-inspector-table :is(th, td, th *, td *) { white-space: normal !important; }
.st-key-lensa-inspector-table :is(td:nth-child(2), td:nth-child(6), td:nth-child(2) *, td:nth-child(6) *) {
    overflow-wrap: anywhere !important;  /* the exact value and the bits; words and short numbers stay whole */
}
@media (max-width: 640px) {
    .st-key-lensa-inspector-table :is(th, td) { font-size: 0.75rem !important; padding: 0.2rem 0.25rem !important; }
}
</style>"""
# Runs in the page itself (st.html is not an iframe). It sets the document's language, which
# Streamlit has no API for, on every run, so a switch of language updates it without a reload.
# It also makes plotly's animation buttons (step 3's Play and Pause, drawn as SVG) reachable with
# Tab and pressable with Enter or Space, and names them for screen readers. On a narrow screen, where
# the sidebar lies over the page, a tap on one of its links closes it, so the next tap reaches the page.
# In the print view (?print=1) it marks the document and opens the sections named in printOpen (the
# charts' data tables), as they appear.
PAGE_SCRIPT = """<script>
(() => {
  document.documentElement.lang = "%(lang)s";
  window.lensaPrintOpen = %(print_open)s;
  document.body.classList.toggle("lensa-print-view", window.lensaPrintOpen.length > 0);
  const openSections = () => {
    for (const summary of document.querySelectorAll('[data-testid="stExpander"] details:not([open]) > summary')) {
      const label = summary.textContent.trim();  // after the icon's own text (a ligature such as "table")
      if (window.lensaPrintOpen.some((open) => label.endsWith(open))) summary.click();
    }
  };
  if (window.lensaPrintOpen.length) openSections();
  if (window.lensaKeyboardButtons) return;
  window.lensaKeyboardButtons = true;
  const press = (button) => button.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  const enable = () => {
    for (const button of document.querySelectorAll(".js-plotly-plot .updatemenu-button:not([tabindex])")) {
      button.setAttribute("tabindex", "0");
      button.setAttribute("role", "button");
      button.setAttribute("aria-label", button.textContent.replace(/[^\\p{L}\\p{N} ]/gu, "").trim());
      button.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); press(button); }
      });
    }
    if (window.lensaPrintOpen.length) openSections();
  };
  new MutationObserver(enable).observe(document.body, {childList: true, subtree: true});
  enable();
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest('[data-testid="stSidebar"] a[href]');
    if (!link || !window.matchMedia("(max-width: %(narrow)dpx)").matches) return;
    setTimeout(() => {
      const close = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
      if (close) close.click();
    }, 0);
  }, true);
})();
</script>"""
# Below this width Streamlit lays its sidebar over the page instead of beside it (its "md" breakpoint).
NARROW_PX = 767
# A visible focus ring on everything the keyboard reaches (3:1 or more on both themes' backgrounds);
# a primary button keeps white on the light theme's accent in both themes (the dark theme's light accent
# under white text is 2:1); with reduced motion, the loss-scale run shows its final state, no animation.
PAGE_STYLE = """<style>
:is(a, button, input, select, textarea, summary, [role="slider"], [role="button"], [tabindex]):focus-visible,
label:has(input:focus-visible), div:not(.lensa-slider):has(> input[type="range"]:focus-visible) {
    outline: 3px solid #3b82f6 !important; outline-offset: 2px !important;
}
[data-testid="stBaseButton-primary"], [data-testid="stBaseButton-primary"]:hover {
    background-color: #a3212f !important; border-color: #a3212f !important; color: #ffffff !important;
}
@media (prefers-reduced-motion: reduce) {
    .js-plotly-plot .updatemenu-container { display: none !important; }
}
</style>"""
_OFF_PAPER = ", ".join(f".st-key-{key}" for key in NOT_ON_PAPER)
_CHROME = (
    '[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stHeader"], '
    '[data-testid="stToolbar"], [data-testid="stDecoration"], [data-testid="stStatusWidget"]'
)
# On paper (any page, printed from the browser's menu or from the print view): no sidebar, header or the
# parts that only work on screen, and the page's whole length, not the one screen its scrolling area shows.
# The print view shows the page that way on screen too, at the width of a sheet, so the charts are laid
# out for it before the browser prints them.
PRINT_STYLE = f"""<style>
@media print {{
    {_CHROME}, {_OFF_PAPER} {{ display: none !important; }}
    html, body, [data-testid="stApp"], [data-testid="stAppViewContainer"], [data-testid="stMain"] {{
        overflow: visible !important; height: auto !important; position: static !important;
    }}
    [data-testid="stMainBlockContainer"] {{ padding: 0 !important; }}
    [data-testid="stPlotlyChart"], [data-testid="stMetric"], [data-testid="stExpander"], table {{
        break-inside: avoid;
    }}
    @page {{ margin: 12mm; }}
}}
body.lensa-print-view :is({_CHROME}) {{ display: none !important; }}
body.lensa-print-view [data-testid="stMainBlockContainer"] {{ max-width: 700px !important; }}
</style>"""


# A step's slider, chart, cards and "Try this" fit one screen (1280×900 and 390×844): the page starts right under
# Streamlit's header bar instead of 6rem down, a phone's title and headline are a size smaller, and a row of metric
# cards the server draws (st.columns) keeps two cards a row on a phone instead of one (scrub.css does the same for
# the component's own cards).
ONE_SCREEN_STYLE = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.75rem !important; }
@media (max-width: 640px) {
    [data-testid="stMainBlockContainer"] h1 {
        font-size: 2rem !important; line-height: 1.2 !important; padding-bottom: 0.25rem !important;
    }
    [data-testid="stMainBlockContainer"] h4 { font-size: 1.1rem !important; padding: 0.25rem 0 !important; }
    [data-testid="stHorizontalBlock"]:has(> [data-testid="stColumn"] [data-testid="stMetric"]) {
        flex-wrap: wrap !important; gap: 0.5rem !important;
    }
    [data-testid="stHorizontalBlock"]:has(> [data-testid="stColumn"] [data-testid="stMetric"])
        > [data-testid="stColumn"] {
        flex: 1 1 calc(50% - 0.5rem) !important; min-width: calc(50% - 0.5rem) !important;
        width: calc(50% - 0.5rem) !important;
    }
}
</style>"""


# Asks the browser for a module the page will import (the scrub component's Plotly.js) while the server is still
# running the page's script: it is fetched and compiled before the component mounts, not after. Relative to the
# page (a page's URL is one level under the app's), so it also holds under a base URL path.
PRELOAD_SCRIPT = """<script>
(() => {
  const href = new URL("./%(path)s", document.baseURI).href;
  if (document.querySelector(`link[rel="modulepreload"][href="${href}"]`)) return;
  const link = document.createElement("link");
  link.rel = "modulepreload";
  link.href = href;
  document.head.appendChild(link);
})();
</script>"""


def page_extras(lang: str, print_open: tuple[str, ...] = (), preload: str | None = None) -> None:
    """The page script and styles: the document's language (``lang``), keyboard-reachable plot buttons, focus
    rings, one screen for a step (:data:`ONE_SCREEN_STYLE`), the sidebar that closes after a tap on a phone, the
    page on paper; ``print_open``: the labels of the sections the print view opens (none outside it);
    ``preload``: a module's path under the app's root to fetch and compile ahead (:data:`PRELOAD_SCRIPT`)."""
    script = PAGE_SCRIPT % {"lang": lang, "print_open": json.dumps(list(print_open)), "narrow": NARROW_PX}
    extra = "" if preload is None else PRELOAD_SCRIPT % {"path": preload.lstrip("/")}
    st.html(PAGE_STYLE + ONE_SCREEN_STYLE + PRINT_STYLE + script + extra, unsafe_allow_javascript=True)
