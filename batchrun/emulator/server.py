"""A local emulator of the OpenAI, Anthropic and Gemini (Developer API) batch and online APIs.

The official, unmodified SDKs talk to it over real HTTP. Wire references: OpenAI
https://platform.openai.com/docs/api-reference/batch, Anthropic
https://platform.claude.com/docs/en/api/creating-message-batches, Gemini
https://ai.google.dev/gemini-api/docs/batch-mode and https://ai.google.dev/api/files.

* OpenAI ``base_url=f"{url}/v1"``: files (multipart upload, content, list, delete), batches
  (create, retrieve, list, cancel), online ``/chat/completions`` and ``/responses``.
* DashScope (Alibaba Model Studio, the OpenAI-compatible provider modelled)
  ``base_url=f"{url}/compatible-mode/v1"``: the same routes with DashScope's rules
  (``dashscope.py``).
* Anthropic ``base_url=url``: ``/v1/messages/batches`` (create, retrieve, list, cancel, results,
  delete) and online ``/v1/messages``.
* Gemini ``http_options={"base_url": url}``: under ``/v1/`` (google-genai 3.x) and ``/v1beta/``
  (older SDKs): ``models/{m}:batchGenerateContent``, ``batches/{id}`` (get, list, ``:cancel``,
  delete), the resumable upload ``/upload/{ver}/files``, file get/list/delete, downloads at
  ``/{ver}/files/{id}:download`` and ``/download/{ver}/files/{id}:download``, online
  ``models/{m}:generateContent``.
* Control: ``/_emulator/health``, ``/_emulator/requests``, ``/_emulator/calls``,
  ``/_emulator/faults`` (GET/POST/DELETE), ``/_emulator/latency`` (POST), ``/_emulator/windows``
  (GET/POST ``{"model": tokens}``/DELETE: per-model context windows, see ``windows.py``),
  ``/_emulator/reset``.
* Context windows and token counting: a request over its model's window is refused as its
  provider refuses it; Anthropic ``POST /v1/messages/count_tokens`` and ``GET /v1/models/{id}``
  (``max_input_tokens``), Gemini ``models/{m}:countTokens`` and ``GET models/{m}``
  (``inputTokenLimit``).

Each provider's routes, auth and wire shapes live in its module (``openai.py``, ``anthropic.py``,
``gemini.py``) over the batch and file handlers they share (``batches.py``, ``files.py``) and the
state (``core.py``); this module is the server that dispatches a request to the first route that
answers it (see the package docstring).

``/v1/batches`` and ``/v1/files`` exist for both OpenAI and Gemini 3.x; the provider is told apart
by the request (Gemini sends ``x-goog-api-key`` / ``x-goog-api-client``, uses ``:verb`` suffixes)
and, for an id, by which provider created the object.

Usage (deterministic): input tokens = ceil(non-CJK characters of the user prompt / 4) + CJK
characters (U+4E00-U+9FFF); output tokens = ceil(len(answer) / 4). See ``wire.py``.

Memory: uploads stream to files in a private temp dir in 1 MiB chunks; batch inputs are read line
by line from disk and results are written line by line to disk; downloads stream from disk.

Logs: ``requests`` holds every accepted request; ``calls`` holds every HTTP call with the status
sent (0 = connection dropped), recorded before the response is written so a client that has its
answer always finds its call there (see ``core.py``).
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import threading
import traceback
from collections.abc import Callable
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..protocol.config import is_loopback
from .anthropic import Anthropic
from .core import Core, Provider
from .dashscope import DashScope
from .faults import HTTP_KINDS, check_seconds, mangle_json
from .gemini import Gemini
from .httpio import CHUNK, ApiError, BodyError, BodyReader, Ctx, Resp, Route, json_resp
from .openai import OpenAI


def presented_credential(headers: Message, query: dict[str, list[str]]) -> str:
    """The credential a call carried, as sent (``Bearer sk-...``, x-api-key, x-goog-api-key, ?key=)."""
    for name in ("Authorization", "x-api-key", "x-goog-api-key"):
        value = headers.get(name)
        if value:
            return str(value)
    values = query.get("key")
    return values[0] if values else ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], emulator: Emulator) -> None:
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6  # "::1"
        self.emulator = emulator
        self.open_connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a run cut at its time limit, a Ctrl-C, a download it abandoned)
        # is no error of the emulator's: socketserver would print a traceback for it on stderr.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a DNS lookup that can take seconds.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the SDKs pool connections
    disable_nagle_algorithm = True  # headers and body are separate writes
    server_version = "batchrun-emulator/1"
    timeout = 300  # idle keep-alive connections are closed after this

    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.conn_lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        with self.server.conn_lock:
            self.server.open_connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        self.server.emulator._dispatch(self)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def send_resp(self, resp: Resp) -> None:
        length = resp.file_length if resp.file_path else len(resp.body)
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(length))
        for key, value in resp.headers:
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        if resp.file_path:
            with open(resp.file_path, "rb") as f:
                remaining = length
                while remaining > 0:
                    chunk = f.read(min(CHUNK, remaining))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    remaining -= len(chunk)
        elif resp.body:
            self.wfile.write(resp.body)

    def drop(self) -> None:
        """Close the connection without any HTTP response."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def check_loopback(host: str) -> None:
    """The one rule for every way of starting the emulator: loopback only.

    It has no authentication, accepts any key, stores every request body it is sent and lets
    anyone who reaches it arm faults; on 0.0.0.0 (or "", which also means every interface) it
    would serve the whole network. ValueError otherwise."""
    if not host or not is_loopback(host):
        raise ValueError(
            f"--host {host!r} is not a loopback address; the emulator has no authentication, so it only "
            "listens on this machine: use 127.0.0.1 (the default), ::1 or localhost"
        )


class Emulator:
    """The emulator: the providers over one shared core, served by a ThreadingHTTPServer bound at
    construction.

    >>> with Emulator(latency=0).start() as emu:
    ...     client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="x")
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        responder: Any = None,
        faults: Any = (),
        windows: Any = None,
        models: Any = (),
        keys: Any = None,
    ) -> None:
        """``models``: ids to accept besides the built-in tables (``models.py``); ``keys``: the only
        API keys to accept (None: any key), the others refused as each provider refuses a wrong key."""
        self._core = Core(latency, responder, faults, windows, models, keys)
        openai, anthropic, gemini = OpenAI(self._core), Anthropic(self._core), Gemini(self._core)
        dashscope = DashScope(self._core)
        # Routes are tried in this order: Anthropic's paths before the /{ver}/batches that Gemini
        # and OpenAI share, Gemini's ":verb" download before its /{ver}/files/{id}.
        self._providers: dict[str, Provider] = {p.name: p for p in (anthropic, gemini, dashscope, openai)}
        self._core.providers = self._providers
        # Whose API a request looks like, before a route claims it (whose envelope an HTTP fault
        # or an unknown route gets): Google's markers first, then Anthropic's, DashScope's path;
        # OpenAI takes the rest.
        self._lookalikes: tuple[Provider, ...] = (gemini, anthropic, dashscope, openai)
        self._routes: dict[str, list[tuple[Route, Provider]]] = {}
        self._shared: list[tuple[Route, Provider]] = []  # routes with a claim (paths two providers share)
        for provider in self._providers.values():
            for route in provider.routes():
                self._routes.setdefault(route.method, []).append((route, provider))
                if route.claim is not None:
                    self._shared.append((route, provider))
        self._control_routes: dict[tuple[str, str], Callable[[Ctx], Resp]] = {
            ("*", "/_emulator/health"): lambda ctx: json_resp({"ok": True}),
            ("GET", "/_emulator/requests"): lambda ctx: json_resp({"requests": self.requests}),
            ("GET", "/_emulator/calls"): lambda ctx: json_resp({"calls": self.calls}),
            ("POST", "/_emulator/reset"): self._control_reset,
            ("GET", "/_emulator/faults"): lambda ctx: json_resp({"faults": self.faults}),
            ("DELETE", "/_emulator/faults"): self._control_clear_faults,
            ("POST", "/_emulator/faults"): self._control_add_faults,
            ("POST", "/_emulator/latency"): self._control_latency,
            ("GET", "/_emulator/windows"): lambda ctx: json_resp({"windows": self._core.windows.as_dict()}),
            ("POST", "/_emulator/windows"): self._control_windows,
            ("DELETE", "/_emulator/windows"): self._control_clear_windows,
        }
        self._thread: threading.Thread | None = None
        try:
            check_loopback(host)
            self._httpd = _Server((host, port), self)
        except BaseException:
            self._core.close()
            raise
        # What the socket really is bound to ("localhost" becomes 127.0.0.1), not what was asked.
        self.host: str = str(self._httpd.server_address[0])
        self.port: int = int(self._httpd.server_address[1])

    # ------------------------------------------------------------------ public API

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Emulator:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="batchrun-emulator", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()
        with self._httpd.conn_lock:
            connections = list(self._httpd.open_connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._core.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_fault(self, fault: dict) -> dict:
        """Arm a fault (see ``faults.py``); returns the normalized copy. Raises ValueError."""
        return self._core.faults.add(fault)

    def clear_faults(self) -> None:
        self._core.faults.clear()

    @property
    def faults(self) -> list[dict]:
        return self._core.faults.list()

    @property
    def latency(self) -> float:
        """Seconds from a batch's creation until it is ready (batches created from now on)."""
        return self._core.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        self._core.latency = check_seconds(seconds)

    def set_windows(self, windows: dict[str, int]) -> None:
        """Context windows in input tokens per model, from now on (0 = no limit; see windows.py)."""
        self._core.windows.update(windows)

    def clear_windows(self) -> None:
        """Back to the default windows."""
        self._core.windows.clear()

    def window(self, model: str) -> int | None:
        """The model's window in input tokens (None: no limit)."""
        return self._core.windows.get(model)

    def add_models(self, models: Any) -> None:
        """Accept these model ids (besides the built-in tables) from now on."""
        self._core.models.add(models)

    def set_latency(self, seconds: float) -> None:
        """Latency for batches created from now on."""
        self.latency = seconds

    @property
    def requests(self) -> list[dict]:
        return self._core.requests

    @property
    def calls(self) -> list[dict]:
        return self._core.calls

    def reset(self) -> None:
        """Forget all files, batches, uploads, logs and faults (latency and responder stay)."""
        self._core.reset()

    # ------------------------------------------------------------------ dispatch

    def _looks_like(self, path: str, headers: Message, query: dict[str, list[str]]) -> str:
        return next(p.name for p in self._lookalikes if p.looks_like(path, headers, query))

    def _dispatch(self, handler: _Handler) -> None:
        core = self._core
        method = handler.command
        split = urlsplit(handler.path)
        path = unquote(split.path)
        query = parse_qs(split.query, keep_blank_values=True)
        provider = self._looks_like(path, handler.headers, query)
        try:
            body = BodyReader(handler.rfile, handler.headers)
        except BodyError as exc:
            handler.close_connection = True
            core.record_call(method, path, 400)
            handler.send_resp(self._error_resp(provider, ApiError(400, str(exc))))  # in the provider's envelope
            return
        core.credential = presented_credential(handler.headers, query)
        host = handler.headers.get("Host") or f"{self.host}:{self.port}"
        ctx = Ctx(method, path, query, handler.headers, body, provider, host, split.path)
        # Each call is logged *before* its response goes out, so a client that has its answer
        # always finds the call in `calls` (status 0 = connection dropped, no response).
        try:
            fault = None if path.startswith("/_emulator") else core.faults.take(HTTP_KINDS, {"method": method, "path": path, "query": split.query, "provider": provider})
            if fault and fault["kind"] == "drop" and fault["when"] == "before":
                body.drain()
                core.record_call(method, path, 0)
                handler.drop()
                return
            if fault and fault["kind"] in ("http_error", "echo_key"):
                body.drain()
                code = int(fault["status"])
                message = fault.get("message") or f"Injected HTTP {code} (emulator fault)"
                if fault["kind"] == "echo_key":
                    message = f"Incorrect API key provided: {core.credential} (emulator echo_key fault)"
                resp = self._error_resp(provider, ApiError(code, message))
            else:
                resp = self._safe_route(ctx)
                body.drain()
                if fault:  # drop "after": the call was processed, the answer is lost
                    core.record_call(method, path, 0)
                    handler.drop()
                    return
        except (BodyError, ConnectionError, OSError) as exc:
            handler.close_connection = True
            if not isinstance(exc, BodyError):  # the client went away
                core.record_call(method, path, 0)
                return
            resp = self._error_resp(provider, ApiError(400, str(exc)))
        if resp.status == 200 and resp.body and resp.content_type.startswith("application/json") and not path.startswith("/_emulator"):
            mangle = core.faults.take("mangle_json", {"method": method, "path": path, "provider": provider})
            if mangle is not None:
                raw = mangle.get("raw")
                resp.body = raw.encode() if isinstance(raw, str) else json.dumps(mangle_json(mangle, json.loads(resp.body))).encode()
        if resp.headers and not path.startswith("/_emulator"):
            names = {k.lower() for k, _ in resp.headers}
            omit = core.faults.take("omit_header", {"method": method, "path": path, "provider": provider, "response_headers": names})
            if omit is not None:
                resp.headers = [(k, v) for k, v in resp.headers if k.lower() != str(omit["header"]).lower()]
        self._providers[ctx.provider].outgoing(ctx, resp)
        core.record_call(method, path, resp.status)
        try:
            handler.send_resp(resp)
        except OSError:
            handler.close_connection = True

    def _safe_route(self, ctx: Ctx) -> Resp:
        try:
            return self._route(ctx)
        except ApiError as exc:
            return self._error_resp(exc.provider or ctx.provider, exc)
        except (BodyError, ConnectionError):
            raise
        except Exception as exc:  # a bug in the emulator: say so in the provider's envelope
            traceback.print_exc(file=sys.stderr)
            return self._error_resp(ctx.provider, ApiError(500, f"emulator internal error: {exc!r}"))

    def _error_resp(self, provider: str, exc: ApiError) -> Resp:
        return self._providers[provider].error_response(exc)

    def _route(self, ctx: Ctx) -> Resp:
        """The first route (in provider order) whose method, path and claim match answers."""
        if ctx.path.startswith("/_emulator"):
            return self._control(ctx)
        for route, provider in self._routes.get(ctx.method, ()):
            args = route.match(ctx)
            if args is not None:
                ctx.provider = provider.name
                return route.handler(ctx, *args)
        # No operation for this method: a path naming an object of a provider (a path two
        # providers share) still answers in that provider's envelope.
        for route, provider in self._shared:
            if route.match(ctx, any_method=True) is not None:
                ctx.provider = provider.name
                break
        raise ApiError(404, f"Unknown route: {ctx.method} {ctx.path}", code="unknown_url")

    # ------------------------------------------------------------------ control API

    def _control(self, ctx: Ctx) -> Resp:
        path = ctx.path.rstrip("/")
        handler = self._control_routes.get((ctx.method, path)) or self._control_routes.get(("*", path))
        if handler is None:
            return json_resp({"error": {"message": f"Unknown route: {ctx.method} {ctx.path}"}}, 404)
        return handler(ctx)

    def _control_reset(self, ctx: Ctx) -> Resp:
        ctx.body.drain()
        self.reset()
        return json_resp({"ok": True})

    def _control_clear_faults(self, ctx: Ctx) -> Resp:
        self.clear_faults()
        return json_resp({"ok": True, "faults": []})

    def _control_add_faults(self, ctx: Ctx) -> Resp:
        data = ctx.json()
        items = data.get("faults") if isinstance(data, dict) and "faults" in data else data
        items = items if isinstance(items, list) else [items]
        try:
            added = [self.add_fault(item) for item in items]
        except ValueError as exc:
            return json_resp({"error": {"message": str(exc)}}, 400)
        return json_resp({"ok": True, "added": added, "faults": self.faults})

    def _control_windows(self, ctx: Ctx) -> Resp:
        data = ctx.json()
        try:
            if not isinstance(data, dict):
                raise ValueError('expected {"model": tokens, ...}')
            self.set_windows(data)
        except ValueError as exc:
            return json_resp({"error": {"message": str(exc)}}, 400)
        return json_resp({"ok": True, "windows": self._core.windows.as_dict()})

    def _control_clear_windows(self, ctx: Ctx) -> Resp:
        self.clear_windows()
        return json_resp({"ok": True})

    def _control_latency(self, ctx: Ctx) -> Resp:
        data = ctx.json()
        try:
            self.set_latency(data["latency"])
        except (KeyError, TypeError, ValueError) as exc:
            why = f": {exc}" if isinstance(exc, ValueError) else ""
            return json_resp({"error": {"message": 'expected {"latency": seconds}' + why}}, 400)
        return json_resp({"ok": True, "latency": self.latency})



def run_emulator(
    host: str = "127.0.0.1",
    port: int = 0,
    latency: float = 0.0,
    responder: Any = None,
    faults: Any = (),
    windows: Any = None,
    models: Any = (),
    keys: Any = None,
) -> None:
    """Serve until SIGTERM, SIGINT or SIGHUP (blocking); prints ``listening on URL`` to stderr first."""
    import signal

    stop = threading.Event()
    # The handlers go in before the emulator serves: a SIGTERM sent as soon as it answers (a
    # supervisor's, a test's) must meet them, not the caller's (`batchrun emulator`'s is the
    # CLI's, which would report a stopped command, exit 143; seen in CI-like runs under load).
    # SIGHUP too (a closed terminal): the CLI's handler would end it with exit 129 and a word about
    # state.db, which the emulator has none of.
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        except ValueError:  # not the main thread: rely on KeyboardInterrupt / the caller
            pass
    emulator: Emulator | None = None
    try:
        emulator = Emulator(host=host, port=port, latency=latency, responder=responder, faults=faults, windows=windows,
                            models=models, keys=keys).start()
        print(f"listening on {emulator.url}", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if emulator is not None:
            emulator.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
