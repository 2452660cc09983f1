"""Browser round trip: a key press on a slider until the page's metric cards show the new values.

    python -m bench.browser_roundtrip [--moves 20]

Chromium on localhost, one session. For each lesson page the first slider is
focused and moved one stop right and back, ``--moves`` times; the time from
the keydown event to the first change of the metric cards is taken in the
page itself (performance.now() and a MutationObserver). On the bare app that
includes the slider's own commit, the websocket, the script run and the
redraw; a lesson step's slider is a scrub component (issue 30) whose cards
answer in the browser, so there it is the browser's own answer, and the
server's rerun after the key is let go is measured by ``bench.scrub`` and
``bench.loadgen``. The bare
Streamlit app (one slider, one metric: ``bench/bare_app.py``) is measured the
same way in the same run, so the figures are also ratios to Streamlit's own.
Targets: p95 at most 250 ms, and median and p95 at most 1.5× the bare app's.
"""

from __future__ import annotations

import argparse

from bench.common import first_slider, median, need_chromium, percentile, publish, table, verdict
from lensa.ui.site import STEPS
from tests.e2e.harness import Server, browser

TARGET_P95_MS = 250.0
TARGET_RATIO = 1.5
BARE_APP = "bench/bare_app.py"

ARM = """() => {
    window.__lensaLatency = null;
    window.__lensaBefore = Array.from(document.querySelectorAll('.lensa-card-value, [data-testid="stMetricValue"]'))
        .map(e => e.innerText).join('|');
    window.__lensaStart = null;
    if (!window.__lensaHooked) {
        window.__lensaHooked = true;
        document.addEventListener('keydown', () => { window.__lensaStart = performance.now(); }, true);
        new MutationObserver(() => {
            if (window.__lensaStart === null || window.__lensaLatency !== null) return;
            const now = Array.from(document.querySelectorAll('.lensa-card-value, [data-testid="stMetricValue"]'))
                .map(e => e.innerText).join('|');
            if (now !== window.__lensaBefore) window.__lensaLatency = performance.now() - window.__lensaStart;
        }).observe(document.body, {subtree: true, childList: true, characterData: true});
    }
}"""


def measure(page, slider, key: str) -> float:
    page.evaluate(ARM)
    slider.press(key)
    page.wait_for_function("() => window.__lensaLatency !== null", timeout=10_000)
    latency = page.evaluate("() => window.__lensaLatency")
    page.wait_for_timeout(150)  # let the run finish before the next move
    return float(latency)


def moves_on(page, url: str, moves: int) -> list[float]:
    """Open ``url``, warm up with one move each way, then time ``moves`` moves of its first slider."""
    slider = first_slider(page, url)
    measure(page, slider, "ArrowRight")
    measure(page, slider, "ArrowLeft")
    return [measure(page, slider, "ArrowRight" if i % 2 == 0 else "ArrowLeft") for i in range(moves)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--moves", type=int, default=20)
    args = parser.parse_args()
    need_chromium()
    rows, everything = [], []
    with browser() as chromium:
        page = chromium.new_page(viewport={"width": 1280, "height": 900})
        with Server(app=BARE_APP) as server:
            bare = moves_on(page, f"{server.url}/", args.moves)
        with Server() as server:
            for info in STEPS:
                times = moves_on(page, f"{server.url}/{info.key}?lang=en", args.moves)
                everything += times
                rows.append(
                    [f"{info.step} {info.key}", len(times), f"{median(times):.0f}", f"{percentile(times, 95):.0f}"]
                )
    rows.append(["all lesson pages", len(everything), f"{median(everything):.0f}", f"{percentile(everything, 95):.0f}"])
    rows.append(["bare Streamlit app", len(bare), f"{median(bare):.0f}", f"{percentile(bare, 95):.0f}"])
    median_ratio = median(everything) / median(bare)
    p95_ratio = percentile(everything, 95) / percentile(bare, 95)
    rows.append(["ratio, lesson ÷ bare", "", f"{median_ratio:.2f}×", f"{p95_ratio:.2f}×"])
    p95 = percentile(everything, 95)
    body = (
        f"Key press on a slider to the metric cards changing, in chromium on localhost, one session, "
        f"{args.moves} moves per page, the bare app first in the same run. "
        f"Targets: p95 ≤ {TARGET_P95_MS:.0f} ms: {verdict(p95 <= TARGET_P95_MS)}; median and p95 ≤ "
        f"{TARGET_RATIO}× the bare app's: {verdict(max(median_ratio, p95_ratio) <= TARGET_RATIO)}.\n\n"
        + table(["page", "moves", "median ms", "p95 ms"], rows)
    )
    publish("browser_roundtrip", "Browser round trip", body)


if __name__ == "__main__":
    main()
