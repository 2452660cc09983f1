"""The server: ``python -m lensa.ui.serve [--server.port 8501 ...]`` (what ``make run`` and the image run).

What a plain ``streamlit run app.py`` does not do, each for a whole class
arriving at once:

- **Every module a page needs is imported here, once, before the server
  accepts a connection.** Streamlit runs each session's script in a thread of
  its own. On a fresh server, the first pages of several learners arriving
  together import numpy, pandas, pyarrow and plotly in several threads at
  once; CPython's import locks then detect a would-be deadlock and hand one
  thread a partially initialised module (``numpy._core._multiarray_umath``),
  whose failed initialisation leaves numpy unloadable for the rest of the
  process ("cannot load module more than once per process"). Imported here,
  in the main thread, the module graph is complete before any script runs.
- **The health endpoint tells the truth.** ``/_stcore/health`` answers 503
  with the reason once a page has failed to import something: in this app
  every import is done here at start-up, so such a failure means the process
  is broken for everyone, and an orchestrator should replace it.
- **What one visitor may make it hold is bounded** (:mod:`lensa.ui.limits`): uploads are capped in size,
  one at a time per session, and in total; a client's websocket frames are capped as they arrive; and
  ``/_stcore/health`` answers 503 once the process is over its memory budget (``LENSA_MEMORY_BUDGET_MB``).
- **A fresh server shows itself the lesson before it says it is healthy** (:mod:`lensa.ui.warm`): each
  step's page once in each language, so the frames every visitor of a page shares are built before a class
  arrives; ``/_stcore/health`` answers 503 "warming up" meanwhile (a few seconds, at most 30).
- **No forced full garbage collection after every script run.** Streamlit
  calls ``gc.collect(2)`` after each run by default (``runner.postScriptGC``,
  turned off in ``.streamlit/config.toml``); under a class that was most of
  the server's CPU. The objects imported at start-up are frozen out of the
  collector's sight (``gc.freeze``), Python's own generational collection
  still runs, and a full collection runs every :data:`FULL_COLLECTION_S`
  seconds on a timer so memory stays bounded however long the server runs.

Any ``--section.option value`` (or ``--section.option=value``) argument is a
Streamlit config option, and so is any ``STREAMLIT_SECTION_OPTION`` environment
variable, as with ``streamlit run`` (the argument wins).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lensa.ui import limits, warm
from lensa.ui.components import scrub

if TYPE_CHECKING:  # for annotations only: starlette is imported when the server starts
    from starlette.types import ASGIApp, Receive, Scope, Send
    from streamlit.starlette import App

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "app.py"
FULL_COLLECTION_S = 30.0

# Third-party modules the pages reach, directly or through Streamlit's elements, beyond what importing
# our own modules brings in (tests/test_serve.py checks that serving every page imports nothing new).
THIRD_PARTY = (
    "numpy",
    "ml_dtypes",
    "pandas",
    "pyarrow",
    "plotly.animation",
    "plotly.graph_objs",
    "plotly.graph_objs._deprecations",
    "plotly.io",
    "plotly.io._json",
    "plotly.io._utils",
    "plotly.offline",
    "plotly.tools",
    "pyarrow.pandas_compat",
    "pyarrow.vendored.version",
    "streamlit.emojis",
    "streamlit.material_icon_names",
    "streamlit.components.v2.manifest_scanner",
    "streamlit.components.v2.get_bidi_component_manager",
    # zipfile decodes member names without the UTF-8 flag as cp437: the first np.load of a recorded run (.npz)
    "encodings.cp437",
)


# Modules of lensa that the server never imports: numba's kernels (loaded only where a recorder or a bench
# summarises a tensor of 64 values or more, or the lab's worker quantizes one below 16 bits; never a page's, see
# lensa.numerics.blockscale_dispatch and lensa.live.lowp).
NOT_PRELOADED = ("lensa.numerics.blockscale_numba", "lensa.lowp_kernels")


def lensa_modules() -> list[str]:
    """Every module of the ``lensa`` package but the torch ones and :data:`NOT_PRELOADED`.

    ``lensa.live`` imports torch only when a run starts, and importing it brings the submodules it re-exports
    (settings, devices, the comparison ...). Its other submodules (the recorder, the reference run) import torch
    and run in the lab's worker process or in a learner's own training loop, never here.
    """
    package = ROOT / "lensa"
    names = (
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in package.rglob("*.py")
    )
    return sorted(name for name in names if not name.startswith("lensa.live.") and name not in NOT_PRELOADED)


def preload() -> list[str]:
    """Import what every page needs, in this (the main) thread, and read the shipped reference run (the lesson's
    "run" data, read once per process): a class arriving together would otherwise read it once per session
    that came before the first read ended. Returns the module names imported."""
    names = [*THIRD_PARTY, *lensa_modules()]
    for name in names:
        importlib.import_module(name)
    from lensa.runstats.reference_run import load_reference

    load_reference()
    return names


class Health:
    """What ``/_stcore/health`` should say beyond Streamlit's own check: the first fatal script error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.broken: str | None = None

    def on_script_error(self, exc: BaseException) -> None:
        """Streamlit's ``on_script_error`` hook: an import failing in a page breaks the process for everyone."""
        if isinstance(exc, ImportError):
            with self._lock:
                if self.broken is None:
                    self.broken = f"{type(exc).__name__}: {exc}"[:300]
        return None  # the page still shows the error as usual


HEALTH = Health()
LIMITS = limits.Limits.from_env()
UPLOADS = limits.UploadGuard(LIMITS)


class HealthMiddleware:
    """ASGI middleware: ``/_stcore/health`` answers 503 with the reason once :data:`HEALTH` is broken.

    Also while the process is over its memory budget (:data:`LIMITS`), so an orchestrator replaces it before
    the kernel kills it with every session on it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/_stcore/health"):
            reason = HEALTH.broken or limits.over_memory_budget(LIMITS) or (None if warm.WARMTH.done else "warming up")
            if reason:
                from starlette.responses import PlainTextResponse

                response = PlainTextResponse(f"unhealthy: {reason}", status_code=503)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# The scrub component's Plotly.js (lensa.ui.components.scrub): its file name carries its version, so a browser may
# keep it for a year without asking again; Streamlit serves component assets as "public" with no lifetime, which a
# browser revalidates, and without a validator downloads again, on every page load (1.2 MB, 0.4 MB gzipped).
IMMUTABLE_ASSET = f"{scrub.ASSET_URL_PREFIX}{scrub.PLOTLY_FILE}"
IMMUTABLE_CACHE_CONTROL = b"public, max-age=31536000, immutable"


class AssetCacheMiddleware:
    """ASGI middleware: the versioned Plotly.js asset answers with a year's ``Cache-Control: immutable``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith(IMMUTABLE_ASSET):
            await self.app(scope, receive, send)
            return

        async def send_cached(message: Any) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"]
                message = {**message, "headers": [*headers, (b"cache-control", IMMUTABLE_CACHE_CONTROL)]}
            await send(message)

        await self.app(scope, receive, send_cached)


def _collect_periodically(stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        gc.collect()


def start_collector(every_s: float = FULL_COLLECTION_S) -> threading.Event:
    """A daemon thread that runs a full collection every ``every_s`` seconds; set the event to stop it."""
    stop = threading.Event()
    threading.Thread(target=_collect_periodically, args=(stop, every_s), name="lensa-gc", daemon=True).start()
    return stop


def parse_config(argv: list[str]) -> dict[str, str]:
    """``--server.port 8501`` and ``--server.port=8501`` into ``{"server.port": "8501"}``."""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or "." not in arg:
            raise SystemExit(f"unexpected argument {arg!r}: options look like --server.port 8501")
        if "=" in arg:
            name, value = arg[2:].split("=", 1)
        elif i + 1 < len(argv):
            name, value = arg[2:], argv[i + 1]
            i += 1
        else:
            raise SystemExit(f"{arg} needs a value")
        options[name] = value
        i += 1
    return options


def environment_options() -> dict[str, str]:
    """Streamlit options set as ``STREAMLIT_*`` environment variables (``STREAMLIT_SERVER_PORT=9000``).

    ``streamlit run`` reads these through its command line parser, which ``App.run`` does not use, so they are
    read here, as that parser would. Sensitive options (the cookie secret) are left to Streamlit's config, which
    reads their variables itself and refuses them as overrides.
    """
    from streamlit import config

    return {
        name: os.environ[option.env_var]
        for name, option in config._config_options_template.items()
        if option.env_var and option.env_var in os.environ and not option.sensitive
    }


def _typed(options: dict[str, str]) -> dict[str, object]:
    """Config values as Streamlit's own option types (a port is an int, a flag a bool)."""
    from streamlit import config

    typed: dict[str, object] = {}
    for name, value in options.items():
        option = config._config_options_template.get(name)
        kind = option.type if option is not None else str
        if kind is bool:
            typed[name] = value.strip().lower() in ("1", "true", "yes", "on")
        elif kind in (int, float):
            typed[name] = kind(value)
        else:
            typed[name] = value
    return typed


def build_app() -> App:
    """The ASGI app: our entry script, the health and upload middleware, and the error hook."""
    from starlette.middleware import Middleware
    from streamlit.starlette import App

    return App(
        str(ENTRY),
        middleware=[
            Middleware(HealthMiddleware),
            Middleware(AssetCacheMiddleware),
            Middleware(limits.UploadGuardMiddleware, guard=UPLOADS),
        ],
        on_script_error=HEALTH.on_script_error,
    )


def install_limits() -> None:
    """The bounds of :mod:`lensa.ui.limits` that are not middleware.

    A client's websocket frames are capped as they arrive, a widget state of bad JSON is read as no value, and
    the browser is told in its page's language when uploads are refused as busy.
    """
    limits.limit_incoming_websocket_messages()
    limits.tolerate_bad_json_widget_values()
    limits.patch_file_url_requests(UPLOADS)


def main(argv: list[str] | None = None) -> None:
    # As with `streamlit run`: a command-line option wins over the same option's environment variable.
    options = _typed({**environment_options(), **parse_config(sys.argv[1:] if argv is None else argv)})
    preload()
    gc.collect()
    gc.freeze()  # what start-up built lives as long as the process: no collection needs to walk it again
    start_collector()
    install_limits()
    start_warmup(options)
    build_app().run(config=options)


def start_warmup(options: dict[str, object]) -> None:
    """Visit the lesson's pages once (:mod:`lensa.ui.warm`) as soon as the server listens where ``options`` say."""
    from streamlit import config

    def option(name: str) -> object:
        return options[name] if name in options else config.get_option(name)

    warm.start(str(option("server.address") or ""), int(option("server.port")), str(option("server.baseUrlPath") or ""))  # type: ignore[call-overload]  # a port option is an int


if __name__ == "__main__":
    main()
