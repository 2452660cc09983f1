"""What one visitor, and all visitors together, may make this server hold.

A public classroom server must survive one visitor with a script. Streamlit checks the file uploader's size
only in the browser, keeps every file a session uploads until that session's script runs again, and accepts
websocket messages of up to ``server.maxMessageSize`` (200 MB by default). :mod:`lensa.ui.serve` installs
what is here at start-up:

- **At the edge** (``.streamlit/config.toml``): ``server.maxUploadSize`` is the largest file the app reads
  (:data:`lensa.runstats.MAX_FILE_BYTES`, 25 MB). Streamlit refuses a larger upload with 413 from its
  ``Content-Length`` before reading the body, and caps the body as it streams when the header is missing or
  lies. ``server.maxWidgetStateSize`` (1 MB) bounds what a browser may send on the websocket, and
  :func:`limit_incoming_websocket_messages` makes the websocket itself refuse a larger frame before it is
  read into memory (uvicorn's ``ws_max_size``, which Streamlit otherwise sets to ``server.maxMessageSize``,
  the limit for what the server sends).
- **Per session** (:class:`UploadGuard`): one upload in flight at a time (another is answered 429), and
  before a new upload the session's older files are dropped but its newest, so a session holds at most its
  current run's file plus the one arriving. A refused upload is answered after :data:`REFUSAL_DELAY_S`
  with ``Connection: close``: its body is never read, and a script retrying at once is slowed down.
- **Per server**: all sessions' uploaded files, plus a reservation of the largest file for every upload in
  flight, stay within ``LENSA_UPLOAD_BUDGET_MB`` (512 MB). Past it, or when the whole process is over its
  memory budget, a new upload is refused: the browser asks for an upload address first, and that answer
  carries "busy, try again in a minute" in the page's language (:func:`patch_file_url_requests`); a client
  that skips it gets 503 with the same words in both languages and ``Retry-After``.
- **Kept runs** (:data:`RECORDINGS`): each session keeps its last lab run's recorded statistics (about
  1.6 MB) and its uploaded run, read from its file (a valid 25 MB file can unpack to about 200 MB), for steps
  2-5. All sessions together keep at most ``LENSA_RECORDINGS_BUDGET_MB`` (256 MB) of them; past it a new
  lab run's results are shown as usual but its recordings are not kept, a new uploaded file is not kept,
  and the page says so.
- **Memory** (:func:`over_memory_budget`): ``/_stcore/health`` answers 503 once the process's resident
  memory is over ``LENSA_MEMORY_BUDGET_MB`` (1024 MB), so an orchestrator replaces it before the kernel's
  out-of-memory killer ends every session at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lensa.runstats import MAX_FILE_BYTES
from lensa.ui import i18n

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOG = logging.getLogger(__name__)
MB = 1024 * 1024

UPLOAD_BUDGET_ENV = "LENSA_UPLOAD_BUDGET_MB"
MEMORY_BUDGET_ENV = "LENSA_MEMORY_BUDGET_MB"
RECORDINGS_BUDGET_ENV = "LENSA_RECORDINGS_BUDGET_MB"
DEFAULT_UPLOAD_BUDGET_MB = 512
DEFAULT_MEMORY_BUDGET_MB = 1024
DEFAULT_RECORDINGS_BUDGET_MB = 256

# Streamlit's streaming cap lets a multipart body exceed the file limit by 1 MB of framing
# (_MAX_UPLOAD_MULTIPART_OVERHEAD_BYTES in its routes): an upload in flight may hold that much.
UPLOAD_RESERVATION_BYTES = MAX_FILE_BYTES + MB
RETRY_AFTER_S = 60
REFUSAL_DELAY_S = 1.0
"""How long a refused upload waits for its answer: no work for the server (the client's body is not read,
and the connection is closed after), but a script that retries at once is slowed to one try a second."""
_UPLOAD_PATH = re.compile(r"/_stcore/upload_file/([^/]+)/([^/]+)$")


def _env_mb(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        LOG.warning("%s=%r is not a whole number of megabytes >= 1; using %d", name, raw, default)
        return default
    return value


@dataclass(frozen=True)
class Limits:
    """The server's budgets in bytes, from the environment (``LENSA_*_MB``; a bad value keeps the default)."""

    upload_budget: int = DEFAULT_UPLOAD_BUDGET_MB * MB
    memory_budget: int = DEFAULT_MEMORY_BUDGET_MB * MB
    recordings_budget: int = DEFAULT_RECORDINGS_BUDGET_MB * MB

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        env = os.environ if environ is None else environ
        return cls(
            upload_budget=_env_mb(env, UPLOAD_BUDGET_ENV, DEFAULT_UPLOAD_BUDGET_MB) * MB,
            memory_budget=_env_mb(env, MEMORY_BUDGET_ENV, DEFAULT_MEMORY_BUDGET_MB) * MB,
            recordings_budget=_env_mb(env, RECORDINGS_BUDGET_ENV, DEFAULT_RECORDINGS_BUDGET_MB) * MB,
        )


# --- memory --------------------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """This process's resident memory now (``VmRSS`` in /proc/self/status; the peak where there is no /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def over_memory_budget(limits: Limits) -> str | None:
    """Why the process is over its memory budget, or None when it is within it."""
    rss = rss_bytes()
    if rss <= limits.memory_budget:
        return None
    return f"memory {rss / MB:.0f} MB is over the budget of {limits.memory_budget / MB:.0f} MB ({MEMORY_BUDGET_ENV})"


# --- the words ------------------------------------------------------------------------------------------------


def busy_text(lang: str) -> str:
    """The words "busy, try again in a minute", in ``lang``."""
    return i18n.text(lang, "limits.upload_busy")


def both_languages(key: str) -> str:
    """A refusal read by a client that is not a page (the HTTP answer): every language, one per line."""
    return "\n".join(i18n.text(lang, key) for lang in i18n.LANGUAGES)


# --- uploads ---------------------------------------------------------------------------------------------------


class UploadGuard:
    """Per-session and per-server bounds on uploaded files, over Streamlit's in-memory upload manager."""

    def __init__(
        self,
        limits: Limits,
        memory_check: Callable[[], str | None] | None = None,
        refusal_delay_s: float = REFUSAL_DELAY_S,
    ) -> None:
        self.limits = limits
        self.refusal_delay_s = refusal_delay_s
        self._memory_check = memory_check or (lambda: over_memory_budget(limits))
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()

    @staticmethod
    def _manager() -> Any:
        from streamlit import runtime

        return runtime.get_instance().uploaded_file_mgr if runtime.exists() else None

    @staticmethod
    def _held(manager: Any) -> int:
        with manager._lock:  # the manager's own lock: its files change in the script threads too
            return sum(len(f.data) for files in manager.file_storage.values() for f in files.values())

    def busy(self, manager: Any = None) -> bool:
        """Whether a new upload would be refused now: the budget is spent or the process is over its memory."""
        manager = manager if manager is not None else self._manager()
        with self._lock:
            reserved = (len(self._in_flight) + 1) * UPLOAD_RESERVATION_BYTES
        held = self._held(manager) if manager is not None else 0
        return held + reserved > self.limits.upload_budget or self._memory_check() is not None

    def begin(self, session_id: str, manager: Any) -> str | None:
        """Admit an upload for ``session_id`` (None) or say why not ("busy", "one at a time")."""
        with self._lock:
            if session_id in self._in_flight:
                return "one at a time"
        self._drop_all_but_newest(session_id, manager)
        if self.busy(manager):
            return "busy"
        with self._lock:
            if session_id in self._in_flight:  # another request of the session got in meanwhile
                return "one at a time"
            self._in_flight.add(session_id)
        return None

    def end(self, session_id: str) -> None:
        with self._lock:
            self._in_flight.discard(session_id)

    @staticmethod
    def _drop_all_but_newest(session_id: str, manager: Any) -> None:
        """The session keeps its newest file (its current run's) and nothing older."""
        with manager._lock:
            files = manager.file_storage.get(session_id)
            older = list(files)[:-1] if files else []
        for file_id in older:
            manager.remove_file(session_id, file_id)


class UploadGuardMiddleware:
    """ASGI middleware: a ``PUT`` of an upload passes :class:`UploadGuard` before Streamlit reads its body.

    A request without a live session or a valid XSRF token is left to Streamlit, which refuses it as it
    always has (400, 403). Every refusal of an upload, ours or Streamlit's (413), closes the connection: a
    refused client's body would otherwise still be read, and thrown away, on the server's event loop, which
    is also every learner's websocket.
    """

    def __init__(self, app: ASGIApp, guard: UploadGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _UPLOAD_PATH.search(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") != "PUT":
            await self.app(scope, receive, send)
            return
        session_id = match.group(1)
        send = _closing_on_refusal(send)
        manager = self.guard._manager()
        if manager is None or not _session_and_xsrf_valid(scope, session_id):
            await self.app(scope, receive, send)
            return
        if _declared_length(scope) > UPLOAD_RESERVATION_BYTES:
            refusal: str | None = "too large"  # as Streamlit would say, before any budget is counted
        else:
            refusal = self.guard.begin(session_id, manager)
        if refusal is not None:
            await asyncio.sleep(self.guard.refusal_delay_s)
            await _refuse(scope, receive, send, refusal)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.guard.end(session_id)


def _closing_on_refusal(send: Send) -> Send:
    """``send`` that adds ``Connection: close`` to an error response, so the rest of its body is never read."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing


def _declared_length(scope: Scope) -> int:
    """The request's ``Content-Length``, or 0 when it has none (or one that is not a number)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def _session_and_xsrf_valid(scope: Scope, session_id: str) -> bool:
    from starlette.requests import Request
    from streamlit import runtime
    from streamlit.web.server.server_util import is_xsrf_enabled
    from streamlit.web.server.starlette.starlette_app_utils import validate_xsrf_token
    from streamlit.web.server.starlette.starlette_server_config import XSRF_COOKIE_NAME

    if not runtime.get_instance().is_active_session(session_id):
        return False
    if not is_xsrf_enabled():
        return True
    request = Request(scope)
    return validate_xsrf_token(request.headers.get("X-Xsrftoken"), request.cookies.get(XSRF_COOKIE_NAME))


async def _refuse(scope: Scope, receive: Receive, send: Send, refusal: str) -> None:
    from starlette.responses import PlainTextResponse

    if refusal == "busy":
        response = PlainTextResponse(
            both_languages("limits.upload_busy"), status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
        )
    elif refusal == "too large":
        response = PlainTextResponse("File too large", status_code=413)
    else:
        response = PlainTextResponse(both_languages("limits.upload_one_at_a_time"), status_code=429)
    await response(scope, receive, send)


# --- the browser's request for an upload address ---------------------------------------------------------------


def session_language(client_state: Any) -> str:
    """The page's language from a session's last ``ClientState``: its URL's ``lang``, else its locale."""
    query = urllib.parse.parse_qs(getattr(client_state, "query_string", "") or "")
    url_lang = (query.get("lang") or [None])[0]
    context = getattr(client_state, "context_info", None)
    locale = getattr(context, "locale", None) if context is not None else None
    return i18n.choose_language(url_lang, None, locale or None)


_ORIGINAL_FILE_URLS: Callable[..., None] | None = None


def patch_file_url_requests(guard: UploadGuard) -> None:
    """While uploads are refused as busy, answer the browser's request for upload addresses with the reason.

    The browser asks the session for an address before each upload (``file_urls_request``) and shows an
    answer's ``error_msg`` under the file uploader, so the learner reads "busy, try again in a minute" in
    the page's language instead of a bare HTTP status. Any other time Streamlit answers as usual.
    """
    global _ORIGINAL_FILE_URLS
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.runtime.app_session import AppSession

    if _ORIGINAL_FILE_URLS is None:
        _ORIGINAL_FILE_URLS = AppSession._handle_file_urls_request
    original = _ORIGINAL_FILE_URLS

    def handle(self: Any, file_urls_request: Any) -> None:
        if not guard.busy():
            original(self, file_urls_request)
            return
        msg = ForwardMsg()
        msg.file_urls_response.response_id = file_urls_request.request_id
        msg.file_urls_response.error_msg = busy_text(session_language(self._client_state))
        self._enqueue_forward_msg(msg)

    AppSession._handle_file_urls_request = handle  # type: ignore[method-assign]  # the documented start-up patch


# --- the lab's recordings ------------------------------------------------------------------------------------------


def recordings_bytes(runs: Iterable[Any]) -> int:
    """About how much memory recorded runs (:class:`lensa.runstats.RunStats`) hold: their count tables, plus a
    fixed allowance per tensor and per step for the Python objects around them."""
    total = 0
    for run in runs:
        for _label, stats in run.items():
            total += int(stats.table.nbytes) + 600
        total += 120 * len(run.losses())
    return total


class RecordingsLedger:
    """The runs each session keeps (its lab run's recordings, its uploaded run), by ``"session/what"``, against a
    budget shared by the whole server."""

    def __init__(self, budget: int, alive: Callable[[str], bool] | None = None) -> None:
        self.budget = budget
        self._alive = alive or _session_alive
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}

    def keep(self, key: str, nbytes: int) -> bool:
        """May ``key`` (``"session/what"``) keep ``nbytes`` (replacing what it kept before)? Sessions that have
        ended no longer count."""
        with self._lock:
            for gone in [k for k in self._held if k != key and not self._alive(k.split("/", 1)[0])]:
                del self._held[gone]
            others = sum(n for k, n in self._held.items() if k != key)
            if others + nbytes > self.budget:
                return False
            self._held[key] = nbytes
            return True

    def held(self) -> int:
        with self._lock:
            return sum(self._held.values())


def _session_alive(session_id: str) -> bool:
    from streamlit import runtime

    return runtime.exists() and runtime.get_instance().is_active_session(session_id)


RECORDINGS = RecordingsLedger(Limits.from_env().recordings_budget)
"""The server's ledger of lab recordings (one per process, like the lab's worker)."""


# --- the websocket ------------------------------------------------------------------------------------------------


def limit_incoming_websocket_messages() -> None:
    """Make uvicorn refuse a client frame over ``server.maxWidgetStateSize`` before it is read into memory.

    Streamlit passes ``server.maxMessageSize`` (the limit for what the *server* sends, 200 MB by default) to
    uvicorn as ``ws_max_size``, which bounds what the server *receives*; it checks the smaller
    ``server.maxWidgetStateSize`` only after a whole frame has arrived. A frame over the limit now closes
    the connection with 1009 (message too big) as its header arrives.
    """
    from streamlit.runtime.runtime_util import get_max_widget_state_size_bytes
    from streamlit.web.server.starlette import starlette_server

    original = starlette_server._get_uvicorn_config_kwargs
    if original in _WS_LIMITED:
        return

    def kwargs() -> dict[str, Any]:
        values = original()
        values["ws_max_size"] = get_max_widget_state_size_bytes()
        return values

    _WS_LIMITED.add(kwargs)
    starlette_server._get_uvicorn_config_kwargs = kwargs


_WS_LIMITED: set[Callable[[], dict[str, Any]]] = set()  # the wrappers installed, so a second call adds none


def tolerate_bad_json_widget_values() -> None:
    """A widget state whose JSON a client wrote badly is read as no value, instead of failing the whole run.

    Streamlit parses a ``json_value`` widget state (a component's state: the lesson's scrub sliders) with
    ``json.loads`` before the script runs and lets the error end the run, so a hand-written client sending
    ``"not json"`` would get a traceback on every rerun of its session. Read as None, the component's state is
    its default and the page's controls keep their values (:mod:`lensa.ui.components.scrub` checks the rest).
    """
    from streamlit.runtime.state import session_state

    original = getattr(session_state, "unpack_widget_state_value")  # noqa: B009  # not in the module's __all__
    if original in _JSON_TOLERANT:
        return

    def unpack(widget_state: Any) -> Any:
        try:
            return original(widget_state)
        except json.JSONDecodeError:
            return None

    _JSON_TOLERANT.add(unpack)
    setattr(session_state, "unpack_widget_state_value", unpack)  # noqa: B010  # the name session_state calls


_JSON_TOLERANT: set[Callable[[Any], Any]] = set()  # the wrappers installed, so a second call adds none
