"""Where a slider move's time goes in the browser: websocket, script run, metric redraw, plotly, long tasks.

    python -m bench.browser_breakdown [--moves 20] [--pages fp16_range,bf16]

The same moves as ``bench.browser_roundtrip`` (first slider, one stop right
and back), with more clocks in the page, all relative to the keydown:

- ``sent``: the browser sends the rerun request (the slider's own commit);
- ``first``: the first websocket message of the new run is handled (on the
  page's main thread, so it is late when that thread is busy: chromium's own
  devtools frame timestamps read the same);
- ``running``: the app shows the run as started (``data-test-script-state``);
- ``metric_msg``: the message that carries the first metric card (found by
  its label) is handled;
- ``metric``: the metric cards show new text (the round trip benchmark's figure);
- ``last`` / ``done``: the run's last message is handled / the app shows the
  run as over;
- ``plotly``: the last DOM change inside a plotly chart (its redraw is over);
- ``longsum`` / ``nlong``: main-thread tasks over 50 ms that began after the
  keydown, summed, and how many there were;
- ``nmsgs`` / ``bytes``: websocket messages of the run and their size.

Prints the median of each over the moves (the metric's p95 too), for the bare
app and each page asked for; the pages take one move each in turn, so a busy
spell on a shared machine hits them all alike. A diagnosis tool: it writes
nothing into docs/performance.md.
"""

from __future__ import annotations

import argparse

from bench.browser_roundtrip import BARE_APP
from bench.common import first_slider, median, need_chromium, percentile, table
from tests.e2e.harness import Server, browser

# Installed before Streamlit's own code runs, so its websocket is the wrapped one.
INIT = """(() => {
    const fresh = () => ({start: null, sent: [], msgs: [], states: [], plotly: [], charts: {}, metric: null,
        metricMsg: null, longs: []});
    const t = window.__lb = fresh();
    const Native = window.WebSocket, decoder = new TextDecoder('utf-8');
    window.WebSocket = function (...args) {
        const ws = new Native(...args);
        ws.addEventListener('message', (e) => {
            if (t.start === null) return;
            const now = performance.now();
            t.msgs.push([now, e.data.byteLength || e.data.length || 0]);
            // The metric's own delta: the first message that carries its label.
            if (t.metricMsg === null && t.label && e.data.byteLength
                && decoder.decode(e.data).includes(t.label)) t.metricMsg = now;
        });
        const send = ws.send.bind(ws);
        ws.send = (d) => { if (t.start !== null) t.sent.push(performance.now()); return send(d); };
        return ws;
    };
    window.WebSocket.prototype = Native.prototype;
    Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
    new PerformanceObserver((list) => {
        for (const e of list.getEntries()) {
            if (t.start !== null && e.startTime >= t.start) t.longs.push([e.startTime, e.duration]);
        }
    }).observe({type: 'longtask', buffered: false});
    document.addEventListener('keydown', () => { t.start = performance.now(); }, true);
    const metricText = () => Array.from(document.querySelectorAll('.lensa-card-value, [data-testid="stMetricValue"]'))
        .map(e => e.innerText).join('|');
    const watch = () => new MutationObserver((records) => {
        if (t.start === null) return;
        const now = performance.now();
        for (const r of records) {
            if (r.type === 'attributes' && r.attributeName === 'data-test-script-state') {
                t.states.push([now, r.target.getAttribute('data-test-script-state')]);
            }
            const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
            const chart = el && el.closest && el.closest('[data-testid="stPlotlyChart"]');
            if (chart) {
                t.plotly.push(now);
                const i = Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"]')).indexOf(chart);
                t.charts[i] = now;
            }
        }
        if (t.metric === null && metricText() !== t.before) t.metric = now;
    }).observe(document.documentElement, {subtree: true, childList: true, characterData: true, attributes: true});
    if (document.documentElement) watch(); else document.addEventListener('DOMContentLoaded', watch);
    window.__lbArm = () => {
        Object.assign(t, fresh());
        t.before = metricText();
        const label = document.querySelector('[data-testid="stMetricLabel"]');
        t.label = label ? label.innerText.trim().split('\\n')[0] : null;
    };
})();"""

READ = """() => {
    const t = window.__lb, s = t.start, rel = (x) => (x === null || x === undefined) ? null : x - s;
    const running = t.states.find(([, v]) => v === 'running');
    const done = t.states.filter(([, v]) => v === 'notRunning').pop();
    return {
        sent: rel(t.sent[0]), first: rel(t.msgs[0] && t.msgs[0][0]),
        last: rel(t.msgs.length ? t.msgs[t.msgs.length - 1][0] : null),
        nmsgs: t.msgs.length, bytes: t.msgs.reduce((a, m) => a + m[1], 0),
        running: rel(running && running[0]), metric_msg: rel(t.metricMsg),
        done: rel(done && done[0]), metric: rel(t.metric),
        plotly: rel(t.plotly.length ? t.plotly[t.plotly.length - 1] : null),
        charts: Object.fromEntries(Object.entries(t.charts).map(([i, v]) => [i, Math.round(v - s)])),
        longsum: t.longs.reduce((a, l) => a + l[1], 0), nlong: t.longs.length,
    };
}"""

COLUMNS = (
    "sent",
    "first",
    "running",
    "metric_msg",
    "metric",
    "last",
    "done",
    "plotly",
    "longsum",
    "nlong",
    "nmsgs",
    "bytes",
)


def one_move(page, slider, key: str, settle_ms: int = 600) -> dict:
    page.evaluate("() => window.__lbArm()")
    slider.press(key)
    page.wait_for_function("() => window.__lb.metric !== null", timeout=10_000)
    page.wait_for_timeout(settle_ms)  # let the run, plotly and late long tasks finish
    return page.evaluate(READ)


def open_page(context, url: str):
    page = context.new_page()
    slider = first_slider(page, url)
    one_move(page, slider, "ArrowRight")
    one_move(page, slider, "ArrowLeft")
    return page, slider


def summarise(name: str, moves: list[dict]) -> list[str]:
    row = [name, str(len(moves))]
    for col in COLUMNS:
        vals = [m[col] for m in moves if m[col] is not None]
        row.append(f"{median(vals):.0f}" if vals else "–")
    row.append(f"{percentile([m['metric'] for m in moves], 95):.0f}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--pages", default="fp16_range,bf16")
    args = parser.parse_args()
    need_chromium()
    results: dict[str, list[dict]] = {}
    with browser() as chromium, Server(app=BARE_APP) as bare, Server() as lensa:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(INIT)
        targets = {"bare": f"{bare.url}/"} | {k: f"{lensa.url}/{k}?lang=en" for k in args.pages.split(",")}
        opened = {name: open_page(context, url) for name, url in targets.items()}
        # Interleaved: one move on each page in turn, so a busy spell on this shared machine hits all alike.
        for i in range(args.moves):
            for name, (page, slider) in opened.items():
                page.bring_to_front()
                results.setdefault(name, []).append(one_move(page, slider, "ArrowRight" if i % 2 == 0 else "ArrowLeft"))
    headers = ["page", "moves", *COLUMNS, "metric p95"]
    print(table(headers, [summarise(name, moves) for name, moves in results.items()]))


if __name__ == "__main__":
    main()
