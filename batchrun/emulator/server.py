"""A local emulator of the OpenAI, Anthropic and Gemini (Developer API) batch and online APIs.

The official, unmodified SDKs talk to it over real HTTP. Wire references: OpenAI
https://platform.openai.com/docs/api-reference/batch, Anthropic
https://platform.claude.com/docs/en/api/creating-message-batches, Gemini
https://ai.google.dev/gemini-api/docs/batch-mode and https://ai.google.dev/api/files.

* OpenAI ``base_url=f"{url}/v1"``: files (multipart upload, content, list, delete), batches
  (create, retrieve, list, cancel), online ``/chat/completions`` and ``/responses``. Any path
  prefix is accepted (``/v4/...`` for OpenAI-compatible providers).
* Anthropic ``base_url=url``: ``/v1/messages/batches`` (create, retrieve, list, cancel, results,
  delete) and online ``/v1/messages``.
* Gemini ``http_options={"base_url": url}``: under ``/v1/`` (google-genai 3.x) and ``/v1beta/``
  (older SDKs): ``models/{m}:batchGenerateContent``, ``batches/{id}`` (get, list, ``:cancel``,
  delete), the resumable upload ``/upload/{ver}/files``, file get/list/delete, downloads at
  ``/{ver}/files/{id}:download`` and ``/download/{ver}/files/{id}:download``, online
  ``models/{m}:generateContent``.
* Control: ``/_emulator/health``, ``/_emulator/requests``, ``/_emulator/calls``,
  ``/_emulator/faults`` (GET/POST/DELETE), ``/_emulator/latency`` (POST), ``/_emulator/reset``.

``/v1/batches`` and ``/v1/files`` exist for both OpenAI and Gemini 3.x; the provider is told apart
by the request (Gemini sends ``x-goog-api-key`` / ``x-goog-api-client``, uses ``:verb`` suffixes)
and, for an id, by which provider created the object.

Batch lifecycle. Every batch gets ``ready_at = created + latency`` (a ``slow`` fault overrides the
latency). A retrieve / list / results call at or after ``ready_at`` processes the batch exactly once
(under the batch's lock): each request is validated, checked against request faults, answered by
the responder and written to the provider's native result form on disk. Before that, OpenAI shows
``validating`` (create response and first retrieve) then ``in_progress``; Anthropic ``in_progress``
with only ``processing`` counted; Gemini ``BATCH_STATE_PENDING`` then ``BATCH_STATE_RUNNING``.
A user cancel before processing processes nothing: OpenAI ``cancelling`` then ``cancelled`` on the
next look; Anthropic ``canceling`` then ``ended`` with ``canceled`` results; Gemini
``BATCH_STATE_CANCELLED`` at once, without results.

Usage (deterministic): input tokens = ceil(non-CJK characters of the user prompt / 4) + CJK
characters (U+4E00-U+9FFF); output tokens = ceil(len(answer) / 4). See ``wire.py``.

Memory: uploads stream to files in a private temp dir in 1 MiB chunks; batch inputs are read line
by line from disk and results are written line by line to disk; downloads stream from disk.

Logs: ``requests`` holds every accepted request (each batch line at create time, in file order,
and every online call; the ``X-Batchrun-Custom-Id`` header names an online call's custom_id);
``calls`` holds every HTTP call with the status sent (0 = connection dropped), recorded before the
response is written so a client that has its answer always finds its call there.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, quote, unquote, urlsplit

from ..config import is_loopback
from . import wire
from .faults import HTTP_KINDS, FaultSet
from .httpio import (
    CHUNK,
    BodyError,
    BodyReader,
    dumps_line,
    iter_jsonl,
    parse_multipart,
)
from .responder import load_responder
from .wire import Outcome

GEMINI_VERSIONS = ("v1", "v1beta", "v1alpha")
GEMINI_BATCH_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
GEMINI_OUTPUT_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
ANTHROPIC_CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OPENAI_FILE_TTL = 30 * 86400  # purpose=batch files expire after 30 days by default
GEMINI_FILE_TTL = 48 * 3600  # Files API files are deleted after 48 h
DAY = 86400

# Headers on every deliberate 429/5xx. Both Stainless SDKs (openai, anthropic) only honour a
# server delay when it is > 0 (`0 < retry_after`); "0" falls back to exponential backoff (0.5 s, 1 s,
# ...). `retry-after-ms: 1` is read first and makes the retry effectively immediate.
RETRY_HEADERS = [("retry-after", "0"), ("retry-after-ms", "1")]

# Online calls have no custom_id on the wire. batchrun's sync transport sends this header so
# that the request log (and custom_id fault matchers / responders) can tie a call to its request.
TRACE_HEADER = "X-Batchrun-Custom-Id"


class ApiError(Exception):
    """An HTTP error answered in the provider's error envelope."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None, provider: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.provider = provider


class Resp:
    """A response to send: JSON/bytes ``body`` or a ``file_path`` streamed from disk."""

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
        file_path: str | None = None,
        file_length: int = 0,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers or []
        self.file_path = file_path
        self.file_length = file_length


def json_resp(obj: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Resp:
    return Resp(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), headers=headers)


@dataclass
class FileRec:
    id: str
    provider: str  # "openai" | "gemini"
    path: str
    size: int
    filename: str
    purpose: str
    created: float
    mime: str = "application/jsonl"
    display_name: str | None = None
    sha256: str | None = None
    generated: bool = False  # a result file written by the emulator (truncate faults apply)
    expires_at: float | None = None


@dataclass
class BatchRec:
    id: str
    provider: str
    seq: int
    created: float
    ready_at: float
    model: str
    endpoint: str
    source_path: str  # JSONL of the requests, private to this batch
    n: int
    completion_window: str = "24h"
    metadata: Any = None
    input_file_id: str | None = None
    display_name: str | None = None
    input_config: dict | None = None
    inline: bool = False
    api_version: str = "v1"
    anthropic_version: str = "2023-06-01"
    # batch-level fault effects, decided at create
    expire_fraction: float | None = None
    cancel_fraction: float | None = None
    fail_validation: bool = False
    quota: bool = False
    invalid_errors: list = field(default_factory=list)
    # lifecycle
    state: str = "pending"  # pending | cancel_requested | done
    looks: int = 0
    final: str | None = None  # completed|failed|expired|cancelled (Gemini: BATCH_STATE_*)
    in_progress_at: float | None = None
    finalizing_at: float | None = None
    ended_at: float | None = None
    cancel_at: float | None = None
    # results
    counts: dict = field(default_factory=dict)
    usage: dict = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list | None = None
    results_path: str | None = None
    inline_responses: list | None = None
    gemini_error: dict | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class Ctx:
    """One HTTP request as the routes see it."""

    method: str
    path: str
    query: dict
    headers: Any
    body: BodyReader
    provider: str
    host: str
    raw_path: str = ""  # the path as sent (percent-encoded): ids that contain "/" route on it

    def q(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def json(self) -> Any:
        raw = self.body.read_all()
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, f"We could not parse the JSON body of your request: {exc}") from None

    @property
    def base(self) -> str:
        return f"http://{self.host}"


def _int_arg(value: str | None, default: int, lo: int, hi: int) -> int:
    try:
        return max(lo, min(hi, int(value))) if value is not None else default
    except ValueError:
        raise ApiError(400, f"Invalid integer query parameter: {value!r}") from None


def detect_provider(path: str, headers: Any, query: dict) -> str:
    """Which provider's API a request is for (and so which error envelope it gets)."""
    if path.startswith(("/upload/", "/download/")):
        return "gemini"
    first = path.split("/", 2)[1] if path.count("/") >= 1 else ""
    if first in ("v1beta", "v1alpha"):
        return "gemini"
    last = path.rsplit("/", 1)[-1]
    if ":" in last:  # Google custom methods: models/x:generateContent, batches/x:cancel, files/x:download
        return "gemini"
    if headers.get("x-goog-api-key") or headers.get("x-goog-api-client") or "key" in query:
        return "gemini"
    if path.startswith("/v1/messages") or headers.get("anthropic-version") or headers.get("x-api-key"):
        return "anthropic"
    return "openai"


def presented_credential(headers: Any, query: dict) -> str:
    """The credential a call carried, as sent (``Bearer sk-...``, x-api-key, x-goog-api-key, ?key=)."""
    for name in ("Authorization", "x-api-key", "x-goog-api-key"):
        value = headers.get(name)
        if value:
            return str(value)
    values = query.get("key")
    return values[0] if values else ""


def truncated_length(path: str, size: int) -> int:
    """A length that ends in the middle of the file's last line (for ``truncate`` faults)."""
    if size <= 1:
        return 0
    with open(path, "rb") as f:
        end = size - 1  # skip the final newline
        start_of_last = 0
        while end > 0:
            lo = max(0, end - 65536)
            f.seek(lo)
            idx = f.read(end - lo).rfind(b"\n")
            if idx >= 0:
                start_of_last = lo + idx + 1
                break
            end = lo
    return start_of_last + max(1, (size - 1 - start_of_last) // 2)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], emulator: "Emulator") -> None:
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6  # "::1"
        self.emulator = emulator
        self.open_connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(addr, _Handler)

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
    """The emulator: state, routes and a ThreadingHTTPServer bound at construction.

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
    ) -> None:
        self._responder = load_responder(responder)
        self._latency = float(latency)
        self._faults = FaultSet()
        for fault in faults or ():
            self._faults.add(json.loads(fault) if isinstance(fault, str) else fault)  # CLI passes JSON text
        self._lock = threading.Lock()
        # The credential of the HTTP call being handled, per handler thread: batch lines are
        # processed inside the retrieve/results call that finds them due (echo_key_request).
        self._call_local = threading.local()
        self._dir = tempfile.mkdtemp(prefix="batchrun-emulator-")
        self._files: dict[str, FileRec] = {}
        self._batches: dict[str, BatchRec] = {}
        self._uploads: dict[str, dict] = {}
        self._requests: list[dict] = []
        self._calls: list[dict] = []
        self._seq = 0
        self._batch_seq = 0
        self._thread: threading.Thread | None = None
        check_loopback(host)
        self._httpd = _Server((host, port), self)
        # What the socket really is bound to ("localhost" becomes 127.0.0.1), not what was asked.
        self.host: str = self._httpd.server_address[0]
        self.port: int = self._httpd.server_address[1]

    # ------------------------------------------------------------------ public API

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> "Emulator":
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
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def add_fault(self, fault: dict) -> dict:
        """Arm a fault (see ``faults.py``); returns the normalized copy. Raises ValueError."""
        return self._faults.add(fault)

    def clear_faults(self) -> None:
        self._faults.clear()

    @property
    def faults(self) -> list[dict]:
        return self._faults.list()

    def set_latency(self, seconds: float) -> None:
        """Latency for batches created from now on."""
        self._latency = float(seconds)

    @property
    def requests(self) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self._requests]

    @property
    def calls(self) -> list[dict]:
        with self._lock:
            return [dict(c) for c in self._calls]

    def reset(self) -> None:
        """Forget all files, batches, uploads, logs and faults (latency and responder stay)."""
        with self._lock:
            self._files.clear()
            self._batches.clear()
            self._uploads.clear()
            self._requests.clear()
            self._calls.clear()
            self._seq = 0
        self._faults.clear()
        for name in os.listdir(self._dir):
            try:
                os.unlink(os.path.join(self._dir, name))
            except OSError:
                pass

    # ------------------------------------------------------------------ plumbing

    def _new_path(self, prefix: str) -> str:
        fd, path = tempfile.mkstemp(prefix=prefix, dir=self._dir)
        os.close(fd)
        return path

    def _record_call(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._calls.append({"method": method, "path": path, "status": status})

    def _log_request(self, provider: str, model: str, custom_id: Any, batch: str, endpoint: str) -> None:
        with self._lock:
            self._seq += 1
            self._requests.append(
                {
                    "seq": self._seq,
                    "provider": provider,
                    "model": model,
                    "custom_id": custom_id,
                    "batch": batch,
                    "endpoint": endpoint,
                    "time": time.time(),
                }
            )

    def _dispatch(self, handler: _Handler) -> None:
        method = handler.command
        split = urlsplit(handler.path)
        path = unquote(split.path)
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            body = BodyReader(handler.rfile, handler.headers)
        except BodyError as exc:
            handler.close_connection = True
            self._record_call(method, path, 400)
            handler.send_resp(json_resp({"error": {"message": str(exc)}}, 400))
            return
        provider = detect_provider(path, handler.headers, query)
        self._call_local.credential = presented_credential(handler.headers, query)
        host = handler.headers.get("Host") or f"{self.host}:{self.port}"
        ctx = Ctx(method, path, query, handler.headers, body, provider, host, split.path)
        # Each call is logged *before* its response goes out, so a client that has its answer
        # always finds the call in `calls` (status 0 = connection dropped, no response).
        try:
            fault = None if path.startswith("/_emulator") else self._faults.take(HTTP_KINDS, {"method": method, "path": path, "provider": provider})
            if fault and fault["kind"] == "drop" and fault["when"] == "before":
                body.drain()
                self._record_call(method, path, 0)
                handler.drop()
                return
            if fault and fault["kind"] in ("http_error", "echo_key"):
                body.drain()
                code = int(fault["status"])
                message = fault.get("message") or f"Injected HTTP {code} (emulator fault)"
                if fault["kind"] == "echo_key":
                    message = f"Incorrect API key provided: {self._call_local.credential} (emulator echo_key fault)"
                resp = self._error_resp(provider, ApiError(code, message))
            else:
                resp = self._safe_route(ctx)
                body.drain()
                if fault:  # drop "after": the call was processed, the answer is lost
                    self._record_call(method, path, 0)
                    handler.drop()
                    return
        except (BodyError, ConnectionError, OSError) as exc:
            handler.close_connection = True
            if not isinstance(exc, BodyError):  # the client went away
                self._record_call(method, path, 0)
                return
            resp = self._error_resp(provider, ApiError(400, str(exc)))
        if resp.headers and not path.startswith("/_emulator"):
            names = {k.lower() for k, _ in resp.headers}
            omit = self._faults.take("omit_header", {"method": method, "path": path, "provider": provider, "response_headers": names})
            if omit is not None:
                resp.headers = [(k, v) for k, v in resp.headers if k.lower() != str(omit["header"]).lower()]
        if path.startswith("/upload/") and resp.status >= 400 and resp.status not in (408, 429) and resp.status < 500:
            # google-genai resends a chunk (sleeping 1, 2, 4 s) while X-Goog-Upload-Status is
            # missing, which is right for transient errors (429/5xx keep no header, as the real
            # service). A permanent error says "final" so the SDK raises the APIError at once.
            resp.headers.append(("X-Goog-Upload-Status", "final"))
        self._record_call(method, path, resp.status)
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
        headers = list(RETRY_HEADERS) if exc.status == 429 or exc.status >= 500 else []
        body = wire.error_body(provider, exc.status, exc.message, exc.param, exc.code)
        if provider == "anthropic":
            headers.append(("request-id", body["request_id"]))
        return json_resp(body, exc.status, headers)

    # ------------------------------------------------------------------ routing

    def _route(self, ctx: Ctx) -> Resp:
        if ctx.path.startswith("/_emulator"):
            return self._control(ctx)
        for route in ROUTES.get(ctx.method, ()):
            match = route.pattern.fullmatch(ctx.raw_path if route.raw else ctx.path)
            if match is None:
                continue
            args = [unquote(g) if route.raw else g for g in match.groups()]
            if route.claim is not None and not route.claim(self, ctx, *args):
                continue
            if route.provider:
                ctx.provider = route.provider
            return getattr(self, route.handler)(ctx, *args)
        # No operation for this method: a path that belongs to a Gemini object still answers in
        # Gemini's envelope.
        for routes in ROUTES.values():
            for route in routes:
                match = route.pattern.fullmatch(ctx.raw_path if route.raw else ctx.path) if route.provider else None
                if match is not None and (route.claim is None or route.claim(self, ctx, *match.groups())):
                    ctx.provider = route.provider
        raise ApiError(404, f"Unknown route: {ctx.method} {ctx.path}", code="unknown_url")

    def _owner(self, ctx: Ctx, store: dict, ident: str | None) -> str:
        """The provider of a shared path (/{ver}/batches, /{ver}/files): whoever created the object
        named in it, else the provider the request looks like."""
        rec = store.get(ident) if ident else None
        return rec.provider if rec is not None else ctx.provider

    def _gemini_claims(self, ctx: Ctx, store: dict, ident: str | None) -> bool:
        return self._owner(ctx, store, ident) == "gemini" and ctx.path.split("/")[1] in GEMINI_VERSIONS

    # ------------------------------------------------------------------ auth

    def _auth(self, ctx: Ctx) -> None:
        headers = ctx.headers
        bearer = (headers.get("Authorization") or "").startswith("Bearer ") and len(headers.get("Authorization")) > 7
        if ctx.provider == "openai":
            if not bearer:
                raise ApiError(401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        elif ctx.provider == "anthropic":
            # The anthropic SDK up to 1.x sends x-api-key; 2.x sends Authorization: Bearer.
            if not (headers.get("x-api-key") or bearer):
                raise ApiError(401, "x-api-key header is required")
            version = headers.get("anthropic-version")
            if not version:
                raise ApiError(400, "anthropic-version: header is required")
            if version not in wire.ANTHROPIC_VERSIONS:
                raise ApiError(400, f"anthropic-version: invalid version {version!r}; the emulator knows {', '.join(wire.ANTHROPIC_VERSIONS)}")
        else:
            # google-genai sends x-goog-api-key; REST users may pass ?key=.
            if not (headers.get("x-goog-api-key") or ctx.q("key")):
                raise ApiError(
                    403,
                    "Method doesn't allow unregistered callers (callers without established identity). "
                    "Please use API Key or other form of API consumer identity to call this API.",
                )

    # ------------------------------------------------------------------ control

    def _control(self, ctx: Ctx) -> Resp:
        path, method = ctx.path.rstrip("/"), ctx.method
        if path == "/_emulator/health":
            return json_resp({"ok": True})
        if path == "/_emulator/requests" and method == "GET":
            return json_resp({"requests": self.requests})
        if path == "/_emulator/calls" and method == "GET":
            return json_resp({"calls": self.calls})
        if path == "/_emulator/reset" and method == "POST":
            ctx.body.drain()
            self.reset()
            return json_resp({"ok": True})
        if path == "/_emulator/faults":
            if method == "GET":
                return json_resp({"faults": self.faults})
            if method == "DELETE":
                self.clear_faults()
                return json_resp({"ok": True, "faults": []})
            if method == "POST":
                data = ctx.json()
                items = data.get("faults") if isinstance(data, dict) and "faults" in data else data
                items = items if isinstance(items, list) else [items]
                try:
                    added = [self.add_fault(item) for item in items]
                except ValueError as exc:
                    return json_resp({"error": {"message": str(exc)}}, 400)
                return json_resp({"ok": True, "added": added, "faults": self.faults})
        if path == "/_emulator/latency" and method == "POST":
            data = ctx.json()
            try:
                self.set_latency(float(data["latency"]))
            except (KeyError, TypeError, ValueError):
                return json_resp({"error": {"message": 'expected {"latency": seconds}'}}, 400)
            return json_resp({"ok": True, "latency": self._latency})
        return json_resp({"error": {"message": f"Unknown route: {method} {ctx.path}"}}, 404)

    # ------------------------------------------------------------------ execution

    def _execute(self, provider: str, model: str, params: Any, custom_id: Any, endpoint: str, anthropic_version: str = "") -> Outcome:
        """Answer one request: validate, apply request faults, call the responder."""
        if provider == "openai":
            invalid = wire.validate_openai(params, endpoint)
            prompt = wire.openai_prompt(params, endpoint) if invalid is None else ""
        elif provider == "anthropic":
            invalid = wire.validate_anthropic(params, anthropic_version)
            prompt = wire.anthropic_prompt(params) if invalid is None else ""
        else:
            invalid = wire.validate_gemini(params, model)
            prompt = wire.gemini_prompt(params) if invalid is None else ""
        if invalid is not None:
            return invalid
        info = {"provider": provider, "model": model, "custom_id": custom_id, "prompt_contains": prompt}
        fault = self._faults.take("request_error", info)
        if fault is not None:
            status = int(fault["status"])
            default = {429: "Rate limit reached (emulator fault).", 529: "Overloaded (emulator fault)."}.get(
                status, f"Internal server error (emulator fault, status {status})."
            )
            return Outcome.error(status, fault.get("message") or default)
        echo = self._faults.take("echo_key_request", info)
        credential = getattr(self._call_local, "credential", "")
        if echo is not None and "status" in echo:
            return Outcome.error(int(echo["status"]), f"Request failed for credential {credential} (emulator echo_key_request fault).")
        if self._faults.take("garbage", info) is not None:
            reply: Any = wire.GARBAGE_ANSWER
        else:
            request = {"provider": provider, "model": model, "prompt": prompt, "params": params, "custom_id": custom_id}
            try:
                reply = self._responder(request)
            except Exception as exc:  # a broken user responder is a server error for that request
                traceback.print_exc(file=sys.stderr)
                return Outcome.error(500, f"responder raised {exc!r}")
        if echo is not None:
            reply = f"{reply if isinstance(reply, str) else ''} The key you sent: {credential}"
        return self._outcome(reply, prompt)

    @staticmethod
    def _outcome(reply: Any, prompt: str) -> Outcome:
        if isinstance(reply, dict):
            if "error" in reply:
                err = reply["error"] if isinstance(reply["error"], dict) else {"message": str(reply["error"])}
                try:
                    status = int(err.get("status") or err.get("code") or 500)
                except (TypeError, ValueError):
                    status = 500
                return Outcome.error(status, str(err.get("message") or f"error {status}"))
            if "refusal" in reply:
                text, kind = str(reply["refusal"] or ""), "refusal"
            else:
                text, kind = str(reply.get("text") or ""), "text"
        else:
            text, kind = ("" if reply is None else str(reply)), "text"
        return Outcome(
            kind, text=text, input_tokens=wire.count_input_tokens(prompt), output_tokens=wire.count_output_tokens(text)
        )

    def _corrupt(self, provider: str, model: str, custom_id: Any, line: str) -> str:
        """A result line as written, or as a ``corrupt_line`` fault rewrites it."""
        fault = self._faults.take("corrupt_line", {"provider": provider, "model": model, "custom_id": custom_id})
        if fault is None:
            return line
        return str(fault["line"]).replace("$CUSTOM_ID", str(custom_id))

    def _batch_faults(self, provider: str, model: str) -> dict:
        """Consume the batch-level faults that match a batch being created."""
        info = {"provider": provider, "model": model}
        # A refused or failed batch never runs, so it does not use up expire/cancel/slow faults.
        for kind in ("quota", "fail_validation"):
            fault = self._faults.take(kind, info)
            if fault is not None:
                return {kind: fault}
        found = {}
        for kinds in (("expire", "cancel"), ("slow",)):  # expire and cancel exclude each other
            fault = self._faults.take(set(kinds), info)
            if fault is not None:
                found[fault["kind"]] = fault
        return found

    def _new_batch(self, provider: str, batch_id: str, model: str, endpoint: str, source: str, n: int, faults: dict, **kw: Any) -> BatchRec:
        now = time.time()
        latency = float(faults["slow"]["latency"]) if "slow" in faults else self._latency
        with self._lock:
            self._batch_seq += 1
            seq = self._batch_seq
        rec = BatchRec(
            id=batch_id, provider=provider, seq=seq, created=now, ready_at=now + latency, model=model,
            endpoint=endpoint, source_path=source, n=n, **kw,
        )
        if "expire" in faults:
            rec.expire_fraction = float(faults["expire"]["complete_fraction"])
        elif "cancel" in faults:
            rec.cancel_fraction = float(faults["cancel"]["complete_fraction"])
        rec.fail_validation = "fail_validation" in faults
        rec.quota = "quota" in faults
        with self._lock:
            self._batches[batch_id] = rec
        return rec

    def _advance(self, rec: BatchRec) -> None:
        """One look at a batch: finish a pending cancel, or process it once it is ready."""
        with rec.lock:
            rec.looks += 1
            if rec.state == "done":
                return
            now = time.time()
            if rec.state == "cancel_requested":
                self._finish(rec, now, cancelled_by_user=True)
            elif rec.quota:
                self._finish(rec, now)
            elif now >= rec.ready_at:
                self._finish(rec, now)
            elif rec.looks >= 2 and rec.in_progress_at is None:
                rec.in_progress_at = now

    def _finish(self, rec: BatchRec, now: float, cancelled_by_user: bool = False) -> None:
        """Process a batch (with rec.lock held) and move it to its terminal state."""
        rec.in_progress_at = rec.in_progress_at or now
        limit, end = rec.n, "completed"
        if cancelled_by_user:
            limit, end = 0, "cancelled"
        elif rec.quota or rec.fail_validation or rec.invalid_errors:
            limit, end = 0, "failed"
        elif rec.expire_fraction is not None:
            limit, end = math.floor(rec.expire_fraction * rec.n), "expired"
        elif rec.cancel_fraction is not None:
            limit, end = math.floor(rec.cancel_fraction * rec.n), "cancelled"
            rec.cancel_at = rec.cancel_at or now
        if end != "failed":
            {"openai": self._process_openai, "anthropic": self._process_anthropic, "gemini": self._process_gemini}[
                rec.provider
            ](rec, limit, end)
        elif rec.provider == "openai":
            if rec.quota:
                rec.errors = [{
                    "code": "token_limit_exceeded",
                    "message": f"Enqueued token limit reached for {rec.model} in organization org-emulator. "
                    "Limit: 90,000 enqueued tokens. Please try again once some in_progress batches have been completed.",
                    "param": None, "line": None,
                }]
            elif rec.invalid_errors:
                rec.errors = rec.invalid_errors
            else:
                rec.errors = [{"code": "invalid_request", "message": "The batch failed validation (emulator fault).", "param": None, "line": 1}]
            rec.counts = {"total": 0 if rec.quota else rec.n, "completed": 0, "failed": 0}
        elif rec.provider == "gemini":
            rec.gemini_error = {"code": 3, "message": "Batch failed validation (emulator fault)."}
            rec.counts = {"requestCount": rec.n}
        rec.finalizing_at = time.time()
        rec.ended_at = time.time()
        if rec.provider == "gemini":
            rec.final = {
                "completed": "BATCH_STATE_SUCCEEDED",
                "failed": "BATCH_STATE_FAILED",
                "expired": "BATCH_STATE_EXPIRED",
                "cancelled": "BATCH_STATE_CANCELLED",
            }[end]
        else:
            rec.final = end
        rec.state = "done"

    # ------------------------------------------------------------------ files (shared)

    def _add_file(self, rec: FileRec) -> FileRec:
        with self._lock:
            self._files[rec.id] = rec
        return rec

    def _get_file(self, file_id: str, provider: str) -> FileRec:
        rec = self._files.get(file_id)
        if rec is None:
            if provider == "gemini":
                raise ApiError(404, f"File files/{file_id} not found.", provider="gemini")
            raise ApiError(404, f"No such File object: {file_id}", param="id", provider="openai")
        return rec

    def _link_private(self, src: str, prefix: str) -> str:
        """A batch's own name for an input file (a hard link: no copy, survives file deletion)."""
        dest = os.path.join(self._dir, prefix + wire.lower_id(16))
        try:
            os.link(src, dest)
        except OSError:
            shutil.copyfile(src, dest)
        return dest

    def _download(self, rec: FileRec, content_type: str) -> Resp:
        length = rec.size
        if rec.generated and self._faults.take("truncate", {"provider": rec.provider}) is not None:
            length = truncated_length(rec.path, rec.size)
        return Resp(200, content_type=content_type, file_path=rec.path, file_length=length)

    # ================================================================== OpenAI

    def _openai_file_json(self, rec: FileRec) -> dict:
        return {
            "id": rec.id,
            "object": "file",
            "bytes": rec.size,
            "created_at": int(rec.created),
            "filename": rec.filename,
            "purpose": rec.purpose,
            "status": "processed",
            "expires_at": int(rec.expires_at) if rec.expires_at else None,
            "status_details": None,
        }

    def _openai_file_create(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        content_type = ctx.headers.get("Content-Type") or ""
        if not content_type.startswith("multipart/form-data"):
            raise ApiError(400, "Expected a multipart/form-data upload with fields 'purpose' and 'file'.")
        file_id = wire.new_id("file-", 22)
        created: list[str] = []

        def open_file() -> tuple[str, Any]:
            path = os.path.join(self._dir, f"{file_id}-{len(created)}")
            created.append(path)
            return path, open(path, "wb")

        try:
            fields, files = parse_multipart(ctx.body, content_type, open_file)
        except BodyError:
            for path in created:
                os.unlink(path)
            raise
        part = files.get("file")
        for extra in created:
            if part is None or extra != part.path:
                os.unlink(extra)
        if part is None:
            raise ApiError(400, "Missing required parameter: 'file'.", param="file")
        purpose = fields.get("purpose")
        if not purpose:
            os.unlink(part.path)
            raise ApiError(400, "Missing required parameter: 'purpose'.", param="purpose")
        now = time.time()
        expires_at: float | None = now + OPENAI_FILE_TTL if purpose == "batch" else None
        if fields.get("expires_after[seconds]"):
            try:
                expires_at = now + int(fields["expires_after[seconds]"])
            except ValueError:
                os.unlink(part.path)
                raise ApiError(400, "Invalid 'expires_after[seconds]': expected an integer.", param="expires_after") from None
        rec = self._add_file(
            FileRec(file_id, "openai", part.path, part.size, part.filename, purpose, now, expires_at=expires_at)
        )
        return json_resp(self._openai_file_json(rec))

    def _openai_file_retrieve(self, ctx: Ctx, file_id: str) -> Resp:
        self._auth(ctx)
        return json_resp(self._openai_file_json(self._get_file(file_id, "openai")))

    def _openai_file_content(self, ctx: Ctx, file_id: str) -> Resp:
        self._auth(ctx)
        return self._download(self._get_file(file_id, "openai"), "application/octet-stream")

    def _openai_file_delete(self, ctx: Ctx, file_id: str) -> Resp:
        self._auth(ctx)
        rec = self._get_file(file_id, "openai")
        with self._lock:
            self._files.pop(file_id, None)
        try:
            os.unlink(rec.path)
        except OSError:
            pass
        return json_resp({"id": file_id, "object": "file", "deleted": True})

    def _openai_file_list(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        purpose = ctx.q("purpose")
        with self._lock:
            items = [f for f in self._files.values() if f.provider == "openai" and (not purpose or f.purpose == purpose)]
        items.sort(key=lambda f: f.created, reverse=ctx.q("order", "desc") != "asc")
        return json_resp(self._cursor_page(items, ctx.q("after"), _int_arg(ctx.q("limit"), 10000, 1, 10000), self._openai_file_json))

    @staticmethod
    def _cursor_page(items: list, after: str | None, limit: int, render: Callable[[Any], dict]) -> dict:
        """OpenAI cursor page: the next page is requested with after=<id of the last item>."""
        start = 0
        if after:
            ids = [item.id for item in items]
            start = ids.index(after) + 1 if after in ids else len(items)
        page = items[start : start + limit]
        data = [render(item) for item in page]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": start + limit < len(items),
        }

    def _openai_batch_create(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        body = ctx.json()
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        endpoint = body.get("endpoint")
        # OpenAI-compatible providers use other prefixes (e.g. /v4/chat/completions), so only the suffix matters.
        if not isinstance(endpoint, str) or not (endpoint.endswith("/chat/completions") or endpoint.endswith("/responses")):
            raise ApiError(400, f"Invalid value for 'endpoint': {endpoint!r}. The emulator supports */chat/completions and */responses.", param="endpoint", code="invalid_value")
        window = body.get("completion_window")
        if not isinstance(window, str) or not window:
            raise ApiError(400, "Missing required parameter: 'completion_window'.", param="completion_window", code="missing_required_parameter")
        file_id = body.get("input_file_id")
        file_rec = self._files.get(file_id) if isinstance(file_id, str) else None
        if file_rec is None or file_rec.provider != "openai":
            raise ApiError(400, f"Invalid 'input_file_id': {file_id!r}. File not found.", param="input_file_id", code="invalid_value")
        metadata = body.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ApiError(400, "Invalid type for 'metadata': expected an object.", param="metadata")

        source = self._link_private(file_rec.path, "openai-input-")
        batch_id = wire.new_id("batch_", 32, "0123456789abcdef")
        # Batch-level faults match on the model, which comes from the first line (one model per file).
        model = ""
        for _number, raw in iter_jsonl(source):
            try:
                model = str(json.loads(raw)["body"].get("model") or "")
                break
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        faults = self._batch_faults("openai", model)
        # One streaming pass: validate the lines and log them as accepted (quota-refused batches
        # never accepted their requests).
        invalid: list[dict] = []
        seen: set = set()
        n = 0
        for number, raw in iter_jsonl(source):
            try:
                line = json.loads(raw)
                if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
                    raise ValueError
            except ValueError:
                invalid.append({"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.", "param": None, "line": number})
                continue
            n += 1
            custom_id = line.get("custom_id")
            if custom_id in seen:
                invalid.append({"code": "duplicate_custom_id", "message": f"The custom_id {custom_id!r} is duplicated.", "param": "custom_id", "line": number})
            seen.add(custom_id)
            if "quota" not in faults:
                self._log_request("openai", str(line["body"].get("model") or ""), custom_id, batch_id, str(line.get("url") or endpoint))
        if not n and not invalid:
            invalid.append({"code": "empty_file", "message": "The input file is empty.", "param": None, "line": None})
        rec = self._new_batch(
            "openai", batch_id, model, endpoint, source, n, faults,
            completion_window=window, metadata=metadata, input_file_id=file_id, invalid_errors=invalid,
        )
        return json_resp(self._openai_batch_json(rec))

    def _openai_batch_json(self, rec: BatchRec) -> dict:
        if rec.state == "done":
            status = rec.final
        elif rec.state == "cancel_requested":
            status = "cancelling"
        else:
            status = "validating" if rec.looks <= 1 else "in_progress"
        counts = rec.counts if rec.state == "done" else {"total": rec.n, "completed": 0, "failed": 0}
        ended = int(rec.ended_at) if rec.ended_at else None
        usage = rec.usage
        return {
            "id": rec.id,
            "object": "batch",
            "endpoint": rec.endpoint,
            "model": rec.model or None,
            "errors": {"object": "list", "data": rec.errors} if rec.errors else None,
            "input_file_id": rec.input_file_id,
            "completion_window": rec.completion_window,
            "status": status,
            "output_file_id": rec.output_file_id,
            "error_file_id": rec.error_file_id,
            "created_at": int(rec.created),
            "in_progress_at": int(rec.in_progress_at) if rec.in_progress_at and status != "failed" else None,
            "expires_at": int(rec.created) + wire.window_seconds(rec.completion_window),
            "finalizing_at": int(rec.finalizing_at) if rec.finalizing_at and status in ("completed", "expired") else None,
            "completed_at": ended if status == "completed" else None,
            "failed_at": ended if status == "failed" else None,
            "expired_at": ended if status == "expired" else None,
            "cancelling_at": int(rec.cancel_at) if rec.cancel_at else None,
            "cancelled_at": ended if status == "cancelled" else None,
            "request_counts": counts,
            "usage": {
                "input_tokens": usage["input_tokens"],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage["output_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            },
            "metadata": rec.metadata,
        }

    def _iter_openai_lines(self, rec: BatchRec) -> Iterator[tuple[Any, str, dict]]:
        for _number, raw in iter_jsonl(rec.source_path):
            line = json.loads(raw)
            yield line.get("custom_id"), str(line.get("url") or rec.endpoint), line["body"]

    def _process_openai(self, rec: BatchRec, limit: int, end: str) -> None:
        out_path, err_path = self._new_path("openai-output-"), self._new_path("openai-errors-")
        completed = failed = 0
        with open(out_path, "w", encoding="utf-8", newline="\n") as out, open(err_path, "w", encoding="utf-8", newline="\n") as err:
            for i, (custom_id, url, body) in enumerate(self._iter_openai_lines(rec)):
                if i < limit:
                    outcome = self._execute("openai", str(body.get("model") or ""), body, custom_id, url)
                elif end == "expired":
                    # Expired requests go to the error file with code batch_expired
                    # (https://platform.openai.com/docs/guides/batch, "Batch expiration").
                    outcome = Outcome("expired")
                else:  # cancelled: unprocessed requests are simply absent
                    break
                line = self._corrupt("openai", str(body.get("model") or ""), custom_id, dumps_line(wire.openai_batch_line(custom_id, outcome, url, body))) + "\n"
                if outcome.ok:
                    out.write(line)
                    completed += 1
                    rec.usage["input_tokens"] += outcome.input_tokens
                    rec.usage["output_tokens"] += outcome.output_tokens
                else:
                    err.write(line)
                    failed += 1
        now = time.time()
        # output_file_id / error_file_id are only set when the file has at least one line.
        for path, count, attr, suffix in ((out_path, completed, "output_file_id", "output"), (err_path, failed, "error_file_id", "error")):
            if count:
                file_id = wire.new_id("file-", 22)
                self._add_file(FileRec(file_id, "openai", path, os.path.getsize(path), f"{rec.id}_{suffix}.jsonl", "batch_output", now, generated=True, expires_at=now + OPENAI_FILE_TTL))
                setattr(rec, attr, file_id)
            else:
                os.unlink(path)
        rec.counts = {"total": rec.n, "completed": completed, "failed": failed}

    def _openai_batch_get(self, batch_id: str) -> BatchRec:
        rec = self._batches.get(batch_id)
        if rec is None or rec.provider != "openai":
            raise ApiError(404, f"No batch found with id '{batch_id}'.", param="batch_id", provider="openai")
        return rec

    def _openai_batch_retrieve(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._openai_batch_get(batch_id)
        self._advance(rec)
        return json_resp(self._openai_batch_json(rec))

    def _openai_batch_list(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        with self._lock:
            items = sorted((b for b in self._batches.values() if b.provider == "openai"), key=lambda b: b.seq, reverse=True)

        def render(rec: BatchRec) -> dict:
            self._advance(rec)
            return self._openai_batch_json(rec)

        return json_resp(self._cursor_page(items, ctx.q("after"), _int_arg(ctx.q("limit"), 20, 1, 100), render))

    def _openai_batch_cancel(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._openai_batch_get(batch_id)
        # A cancel is not a look: a batch that nobody has retrieved since it became ready is
        # still cancellable, and then nothing is processed.
        with rec.lock:
            if rec.state == "done":
                # 400, not 409: the Stainless SDKs retry 409s.
                raise ApiError(400, f"Cannot cancel a batch with status '{rec.final}'.", provider="openai")
            if rec.state == "pending":
                rec.state = "cancel_requested"
                rec.cancel_at = time.time()
            return json_resp(self._openai_batch_json(rec))

    def _openai_online(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        body = ctx.json()
        endpoint = ctx.path
        model = str(body.get("model") or "") if isinstance(body, dict) else ""
        custom_id = ctx.headers.get(TRACE_HEADER)
        self._log_request("openai", model, custom_id, "online", endpoint)
        outcome = self._execute("openai", model, body, custom_id, endpoint)
        if not outcome.ok:
            raise ApiError(outcome.status, outcome.message, outcome.param, outcome.code)
        return json_resp(wire.openai_success_body(endpoint, body, outcome))

    # ================================================================== Anthropic

    def _anthropic_create(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        body = ctx.json()
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            raise ApiError(400, "requests: Field required" if requests is None else "requests: List should have at least 1 item")
        seen: set = set()
        for i, item in enumerate(requests):
            if not isinstance(item, dict) or not isinstance(item.get("params"), dict):
                raise ApiError(400, f"requests.{i}.params: Field required")
            custom_id = item.get("custom_id")
            if not isinstance(custom_id, str) or not ANTHROPIC_CUSTOM_ID_RE.match(custom_id):
                raise ApiError(400, f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
            if custom_id in seen:
                raise ApiError(400, f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}; custom_id must be unique within a batch.")
            seen.add(custom_id)
        model = str(requests[0]["params"].get("model") or "")
        faults = self._batch_faults("anthropic", model)
        # The Message Batches API has no "failed" batch state: quota and validation refusals are
        # synchronous HTTP errors on create, and nothing is accepted.
        if "quota" in faults:
            raise ApiError(429, f"Number of batch requests in the queue exceeds your rate limit for {model} (emulator quota fault).")
        if "fail_validation" in faults:
            raise ApiError(400, "requests.0.params: batch failed validation (emulator fault).")
        source = self._new_path("anthropic-input-")
        with open(source, "w", encoding="utf-8", newline="\n") as f:
            for item in requests:
                f.write(dumps_line({"custom_id": item["custom_id"], "params": item["params"]}) + "\n")
        batch_id = wire.new_id("msgbatch_01", 22)
        for item in requests:  # logged before the batch becomes visible to retrieve/list
            self._log_request("anthropic", str(item["params"].get("model") or ""), item["custom_id"], batch_id, "/v1/messages")
        rec = self._new_batch(
            "anthropic", batch_id, model, "/v1/messages", source, len(requests), faults,
            anthropic_version=ctx.headers.get("anthropic-version") or "2023-06-01",
        )
        alias = self._faults.take("alias_batch", {"provider": "anthropic", "model": model})
        if alias is not None:
            with self._lock:  # the same batch, also known (and listed first) under a hostile id
                self._batches[alias["id"]] = rec
        del requests, body
        return json_resp(self._anthropic_batch_json(rec, ctx))

    def _anthropic_batch_json(self, rec: BatchRec, ctx: Ctx, shown_id: str | None = None) -> dict:
        shown_id = shown_id or rec.id  # an alias_batch fault shows the batch under another id
        done = rec.state == "done"
        status = "ended" if done else ("canceling" if rec.state == "cancel_requested" else "in_progress")
        # Requests count as `processing` until the whole batch has ended; only then do they move
        # to succeeded/errored/canceled/expired (request_counts in
        # https://platform.claude.com/docs/en/api/creating-message-batches).
        counts = rec.counts if done else {"processing": rec.n, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        return {
            "id": shown_id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "ended_at": wire.rfc3339(rec.ended_at) if done else None,
            "created_at": wire.rfc3339(rec.created),
            "expires_at": wire.rfc3339(rec.created + DAY),
            "cancel_initiated_at": wire.rfc3339(rec.cancel_at),
            "archived_at": None,
            # The SDK uses an absolute results_url verbatim, so build it from the Host the client used.
            "results_url": f"{ctx.base}/v1/messages/batches/{quote(shown_id, safe='')}/results" if done else None,
        }

    def _process_anthropic(self, rec: BatchRec, limit: int, end: str) -> None:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        path = self._new_path("anthropic-results-")
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            for i, (_number, raw) in enumerate(iter_jsonl(rec.source_path)):
                item = json.loads(raw)
                params = item["params"]
                model = str(params.get("model") or "")
                if i < limit:
                    outcome = self._execute("anthropic", model, params, item["custom_id"], "/v1/messages", rec.anthropic_version)
                else:
                    outcome = Outcome("expired" if end == "expired" else "canceled")
                key = {"text": "succeeded", "refusal": "succeeded", "error": "errored"}.get(outcome.kind, outcome.kind)
                counts[key] += 1
                # Exactly one "\n" per record: the SDK's JSONL decoder chokes on blank lines.
                out.write(self._corrupt("anthropic", model, item["custom_id"], dumps_line(wire.anthropic_result_line(item["custom_id"], model, outcome))) + "\n")
        rec.results_path = path
        rec.counts = counts

    def _anthropic_get(self, batch_id: str) -> BatchRec:
        rec = self._batches.get(batch_id)
        if rec is None or rec.provider != "anthropic":
            raise ApiError(404, f"Message batch {batch_id} not found.", provider="anthropic")
        return rec

    def _anthropic_retrieve(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._anthropic_get(batch_id)
        self._advance(rec)
        return json_resp(self._anthropic_batch_json(rec, ctx, batch_id))

    def _anthropic_list(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        with self._lock:
            # (shown id, batch): a batch with an alias (alias_batch fault) is listed twice, the alias first.
            entries = sorted(((k, b) for k, b in self._batches.items() if b.provider == "anthropic"),
                             key=lambda e: (e[1].seq, e[0] != e[1].id), reverse=True)
        limit = _int_arg(ctx.q("limit"), 20, 1, 1000)
        ids = [k for k, _ in entries]
        items = entries
        before_id, after_id = ctx.q("before_id"), ctx.q("after_id")
        if before_id:
            stop = ids.index(before_id) if before_id in ids else 0
            start = max(0, stop - limit)
            page, has_more = items[start:stop], start > 0
        else:
            start = ids.index(after_id) + 1 if after_id and after_id in ids else (len(ids) if after_id else 0)
            page, has_more = items[start : start + limit], start + limit < len(items)
        data = []
        for shown_id, rec in page:
            self._advance(rec)
            data.append(self._anthropic_batch_json(rec, ctx, shown_id))
        return json_resp({
            "data": data,
            "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        })

    def _anthropic_cancel(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._anthropic_get(batch_id)
        with rec.lock:  # not a look (see _openai_batch_cancel)
            if rec.state == "done":
                raise ApiError(400, f"Batch {batch_id} has already ended and cannot be canceled.")
            if rec.state == "pending":
                rec.state = "cancel_requested"
                rec.cancel_at = time.time()
            return json_resp(self._anthropic_batch_json(rec, ctx, batch_id))

    def _anthropic_results(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._anthropic_get(batch_id)
        self._advance(rec)
        if rec.state != "done" or not rec.results_path:
            raise ApiError(404, f"Results for message batch {batch_id} are not available: the batch has not ended yet.")
        file_rec = FileRec(rec.id, "anthropic", rec.results_path, os.path.getsize(rec.results_path), "results.jsonl", "results", rec.created, generated=True)
        return self._download(file_rec, "application/x-jsonl")

    def _anthropic_delete(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._anthropic_get(batch_id)
        self._advance(rec)
        if rec.state != "done":
            raise ApiError(400, f"Batch {batch_id} cannot be deleted while it is still processing; cancel it first.")
        with self._lock:
            self._batches.pop(batch_id, None)
        return json_resp({"id": batch_id, "type": "message_batch_deleted"})

    def _anthropic_online(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        params = ctx.json()
        model = str(params.get("model") or "") if isinstance(params, dict) else ""
        custom_id = ctx.headers.get(TRACE_HEADER)
        self._log_request("anthropic", model, custom_id, "online", "/v1/messages")
        outcome = self._execute("anthropic", model, params, custom_id, "/v1/messages", ctx.headers.get("anthropic-version") or "")
        if not outcome.ok:
            raise ApiError(outcome.status, outcome.message)
        return json_resp(wire.anthropic_message(model, outcome))

    # ================================================================== Gemini

    def _gemini_file_json(self, rec: FileRec, ctx: Ctx, version: str = "v1beta") -> dict:
        data = {
            "name": f"files/{rec.id}",
            "mimeType": rec.mime,
            "sizeBytes": str(rec.size),  # int64 as a JSON string
            "createTime": wire.rfc3339(rec.created),
            "updateTime": wire.rfc3339(rec.created),
            "expirationTime": wire.rfc3339(rec.created + GEMINI_FILE_TTL),
            "sha256Hash": rec.sha256 or "",
            "uri": f"{ctx.base}/{version}/files/{rec.id}",
            "state": "ACTIVE",
            "source": "GENERATED" if rec.generated else "UPLOADED",
        }
        if rec.display_name:
            data["displayName"] = rec.display_name
        if rec.generated:
            data["downloadUri"] = f"{ctx.base}/download/{version}/files/{rec.id}:download?alt=media"
        return data

    def _gemini_upload(self, ctx: Ctx, version: str) -> Resp:
        """Resumable upload (https://ai.google.dev/api/files, media.upload): a start POST, then chunk
        POSTs to the X-Goog-Upload-URL it returned (X-Goog-Upload-Command: upload[, finalize])."""
        ctx.provider = "gemini"
        upload_id = ctx.q("upload_id")
        if upload_id is None:
            return self._gemini_upload_start(ctx, version)
        # Chunk requests carry no API key: the upload URL itself authorises them.
        with self._lock:
            session = self._uploads.get(upload_id)
        if session is None:
            raise ApiError(404, f"Unknown upload session {upload_id!r}.")
        command = (ctx.headers.get("X-Goog-Upload-Command") or "").lower()
        commands = {c.strip() for c in command.split(",")}
        status_headers = lambda state: [("X-Goog-Upload-Status", state)]  # noqa: E731
        if "query" in commands:
            return Resp(200, b"", headers=status_headers("active") + [("X-Goog-Upload-Size-Received", str(session["offset"]))])
        with session["lock"]:
            if "upload" in commands:
                try:
                    offset = int(ctx.headers.get("X-Goog-Upload-Offset") or session["offset"])
                except ValueError:
                    raise ApiError(400, "Invalid X-Goog-Upload-Offset.") from None
                if offset > session["offset"]:
                    raise ApiError(400, f"X-Goog-Upload-Offset {offset} is beyond the {session['offset']} bytes received.")
                with open(session["path"], "r+b") as f:
                    f.seek(offset)
                    f.truncate()  # a resent chunk replaces what followed its offset
                    written = ctx.body.copy_to(f)
                session["offset"] = offset + written
            if "finalize" not in commands:
                return Resp(200, b"", headers=status_headers("active"))
            digest = hashlib.sha256()
            with open(session["path"], "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    digest.update(chunk)
            with self._lock:
                self._uploads.pop(upload_id, None)
            meta = session["file"]
            rec = self._add_file(
                FileRec(
                    session["id"], "gemini", session["path"], session["offset"], meta.get("display_name") or "",
                    "gemini", time.time(), mime=session["mime"], display_name=meta.get("display_name"), sha256=digest.hexdigest(),
                )
            )
        return Resp(200, json.dumps({"file": self._gemini_file_json(rec, ctx, session["version"])}).encode(), headers=status_headers("final"))

    def _gemini_upload_start(self, ctx: Ctx, version: str) -> Resp:
        self._auth(ctx)
        protocol = (ctx.headers.get("X-Goog-Upload-Protocol") or "").lower()
        if protocol != "resumable" or "start" not in (ctx.headers.get("X-Goog-Upload-Command") or "").lower():
            raise ApiError(400, "The emulator supports only the resumable upload protocol (X-Goog-Upload-Protocol: resumable, X-Goog-Upload-Command: start).")
        body = ctx.json()
        meta = body.get("file") if isinstance(body, dict) and isinstance(body.get("file"), dict) else {}
        display_name = wire.gemini_get(meta, "displayName")
        mime = ctx.headers.get("X-Goog-Upload-Header-Content-Type") or wire.gemini_get(meta, "mimeType") or "application/octet-stream"
        if mime == "jsonl":  # the docs' config={"mime_type": "jsonl"}
            mime = "application/jsonl"
        name = meta.get("name")
        file_id = name[len("files/"):] if isinstance(name, str) and name.startswith("files/") else (name or wire.lower_id(12))
        if not isinstance(file_id, str) or not re.fullmatch(r"[a-z0-9-]{1,40}", file_id):
            # The Files API's rule, and what keeps a client's name from leading out of our folder.
            raise ApiError(400, f"Invalid file name {name!r}: a name is at most 40 lowercase alphanumeric characters or dashes.")
        if file_id in self._files:
            raise ApiError(409, f"File files/{file_id} already exists.")
        upload_id = wire.new_id("ABgVH", 40)
        path = os.path.join(self._dir, f"gemini-{file_id}-{wire.lower_id(6)}")
        open(path, "wb").close()
        with self._lock:
            self._uploads[upload_id] = {
                "id": file_id, "path": path, "offset": 0, "mime": mime, "version": version,
                "file": {"display_name": display_name}, "lock": threading.Lock(),
            }
        upload_url = f"{ctx.base}/upload/{version}/files?upload_id={upload_id}&upload_protocol=resumable"
        return Resp(200, b"", headers=[
            ("X-Goog-Upload-URL", upload_url),
            ("X-Goog-Upload-Status", "active"),
            ("X-Goog-Upload-Chunk-Granularity", str(8 * 1024 * 1024)),
        ])

    def _gemini_file_get(self, ctx: Ctx, file_id: str) -> Resp:
        self._auth(ctx)
        version = ctx.path.split("/")[1]
        return json_resp(self._gemini_file_json(self._get_file(file_id, "gemini"), ctx, version))

    def _gemini_file_delete(self, ctx: Ctx, file_id: str) -> Resp:
        self._auth(ctx)
        rec = self._get_file(file_id, "gemini")
        with self._lock:
            self._files.pop(file_id, None)
        try:
            os.unlink(rec.path)
        except OSError:
            pass
        return json_resp({})

    def _gemini_file_list(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        version = ctx.path.split("/")[1]
        with self._lock:
            items = sorted((f for f in self._files.values() if f.provider == "gemini"), key=lambda f: f.created, reverse=True)
        page, token = self._token_page(items, ctx)
        out: dict = {"files": [self._gemini_file_json(f, ctx, version) for f in page]}
        if token:
            out["nextPageToken"] = token
        return json_resp(out)

    @staticmethod
    def _token_page(items: list, ctx: Ctx) -> tuple[list, str | None]:
        size = _int_arg(ctx.q("pageSize"), 50, 1, 1000)
        start = _int_arg(ctx.q("pageToken") or None, 0, 0, 1 << 60)
        page = items[start : start + size]
        return page, (str(start + size) if start + size < len(items) else None)

    def _gemini_download(self, ctx: Ctx, file_id: str) -> Resp:
        ctx.provider = "gemini"
        self._auth(ctx)
        rec = self._get_file(file_id, "gemini")
        return self._download(rec, rec.mime or "application/octet-stream")

    def _gemini_batch_create(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        self._auth(ctx)
        model = model_path[len("models/"):] if model_path.startswith("models/") else model_path
        body = ctx.json()
        batch = body.get("batch") if isinstance(body, dict) and isinstance(body.get("batch"), dict) else body
        if not isinstance(batch, dict):
            raise ApiError(400, "Invalid JSON payload: expected {\"batch\": {...}}.")
        display_name = wire.gemini_get(batch, "displayName")
        input_config = wire.gemini_get(batch, "inputConfig")
        if not isinstance(input_config, dict):
            raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config: input_config is required")
        file_name = wire.gemini_get(input_config, "fileName")
        inline = wire.gemini_get(input_config, "requests")
        keys: list = []
        if file_name:
            file_id = file_name[len("files/"):] if file_name.startswith("files/") else file_name
            file_rec = self._files.get(file_id)
            if file_rec is None or file_rec.provider != "gemini":
                raise ApiError(400, f"File {file_name} not found or not accessible.")
            source = self._link_private(file_rec.path, "gemini-input-")
            for _number, raw in iter_jsonl(source):
                try:
                    line = json.loads(raw)
                    keys.append(line.get("key") if isinstance(line, dict) else None)
                except ValueError:
                    keys.append(None)
            echo: dict = {"fileName": f"files/{file_id}"}
            is_inline = False
        elif inline is not None:
            items = wire.gemini_get(inline, "requests") if isinstance(inline, dict) else inline
            if not isinstance(items, list) or not items:
                raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config.requests: requests must not be empty")
            source = self._new_path("gemini-inline-")
            with open(source, "w", encoding="utf-8", newline="\n") as f:
                for item in items:
                    item = item if isinstance(item, dict) else {}
                    metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else None
                    key = metadata.get("key") if metadata else None
                    keys.append(key)
                    if "request" in item:
                        request = item["request"]
                    else:  # tolerate a bare GenerateContentRequest with metadata beside it
                        request = {k: v for k, v in item.items() if k != "metadata"} or None
                    f.write(dumps_line({"key": key, "metadata": metadata, "request": request}) + "\n")
            echo = {}
            is_inline = True
        else:
            raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config: either file_name or requests is required")
        faults = self._batch_faults("gemini", model)
        if "quota" in faults:
            os.unlink(source)
            raise ApiError(429, f"Resource has been exhausted: enqueued batch tokens quota exceeded for model {model} (emulator quota fault).")
        batch_id = wire.lower_id(36)
        endpoint = f"/{version}/models/{model}:generateContent"
        for key in keys:  # logged before the batch becomes visible to get/list
            self._log_request("gemini", model, key, batch_id, endpoint)
        rec = self._new_batch(
            "gemini", batch_id, model, endpoint, source, len(keys), faults,
            display_name=display_name, input_config=echo, inline=is_inline, api_version=version,
        )
        return json_resp(self._gemini_batch_json(rec, ctx))

    def _gemini_batch_json(self, rec: BatchRec, ctx: Ctx) -> dict:
        done = rec.state == "done"
        state = rec.final if done else ("BATCH_STATE_PENDING" if rec.looks <= 1 else "BATCH_STATE_RUNNING")
        name = f"batches/{rec.id}"
        # int64 fields are JSON strings; proto3 JSON omits zero counts.
        if done:
            stats = {k: str(v) for k, v in rec.counts.items() if v or k == "requestCount"}
        else:
            stats = {"requestCount": str(rec.n), "pendingRequestCount": str(rec.n)}
        metadata: dict = {
            "@type": GEMINI_BATCH_TYPE,
            "model": f"models/{rec.model}",
            "createTime": wire.rfc3339(rec.created),
            "updateTime": wire.rfc3339(rec.ended_at or rec.created),
            "batchStats": stats,
            "state": state,
            "name": name,
        }
        if rec.display_name:
            metadata["displayName"] = rec.display_name
        if rec.input_config:
            metadata["inputConfig"] = rec.input_config
        op: dict = {"name": name, "metadata": metadata}
        if done:
            metadata["endTime"] = wire.rfc3339(rec.ended_at)
            op["done"] = True
            output: dict | None = None
            if rec.output_file_id:
                output = {"responsesFile": f"files/{rec.output_file_id}"}
            elif rec.inline_responses is not None:
                # Inline output is double-nested: output.inlinedResponses.inlinedResponses[].
                output = {"inlinedResponses": {"inlinedResponses": rec.inline_responses}}
            if output is not None:
                metadata["output"] = output  # what the SDK reads
                op["response"] = {"@type": GEMINI_OUTPUT_TYPE, **output}  # what REST users read
            if rec.gemini_error:
                op["error"] = rec.gemini_error
        return op

    def _iter_gemini_lines(self, rec: BatchRec) -> Iterator[tuple[Any, dict | None, Any]]:
        """(key, metadata, request) per input line; request is None for an unparseable line."""
        for _number, raw in iter_jsonl(rec.source_path):
            try:
                line = json.loads(raw)
            except ValueError:
                yield None, None, None
                continue
            if not isinstance(line, dict):
                yield None, None, None
            elif rec.inline:
                yield line.get("key"), line.get("metadata"), line.get("request")
            elif "request" in line:
                yield line.get("key"), None, line.get("request")
            else:  # a bare GenerateContentRequest line (the docs' key-less variant)
                yield None, None, line

    def _process_gemini(self, rec: BatchRec, limit: int, end: str) -> None:
        counts = {"requestCount": rec.n, "successfulRequestCount": 0, "failedRequestCount": 0, "pendingRequestCount": 0}
        rec.counts = counts
        if end == "expired":
            # An expired job has no results to retrieve (BATCH_STATE_EXPIRED in
            # https://ai.google.dev/gemini-api/docs/batch-mode).
            return
        inline: list = []
        out_path = None if rec.inline else self._new_path("gemini-responses-")
        out = open(out_path, "w", encoding="utf-8", newline="\n") if out_path else None
        try:
            for i, (key, metadata, request) in enumerate(self._iter_gemini_lines(rec)):
                if i >= limit:
                    break
                if request is None:
                    outcome = Outcome.error(400, "Invalid JSON payload received: the line is not a JSON object.")
                else:
                    outcome = self._execute("gemini", rec.model, request, key, rec.endpoint)
                if outcome.ok:
                    counts["successfulRequestCount"] += 1
                    entry: dict = {"response": wire.gemini_response(rec.model, outcome)}
                else:
                    counts["failedRequestCount"] += 1
                    entry = {"error": wire.gemini_line_error(outcome)}
                if out is not None:
                    line = {"key": key, **entry} if key is not None else entry
                    out.write(self._corrupt("gemini", rec.model, key, dumps_line(line)) + "\n")  # same order as the input
                else:
                    if metadata:
                        entry["metadata"] = metadata
                    inline.append(entry)
        finally:
            if out is not None:
                out.close()
        if out_path:
            file_id = wire.lower_id(12)
            self._add_file(FileRec(file_id, "gemini", out_path, os.path.getsize(out_path), f"batch-{rec.id}", "gemini", time.time(), display_name=f"batch-{rec.id}-responses", generated=True))
            rec.output_file_id = file_id
        else:
            rec.inline_responses = inline

    def _gemini_batch(self, batch_id: str) -> BatchRec:
        rec = self._batches.get(batch_id)
        if rec is None or rec.provider != "gemini":
            raise ApiError(404, f"Batch batches/{batch_id} not found.", provider="gemini")
        return rec

    def _gemini_batch_get(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._gemini_batch(batch_id)
        self._advance(rec)
        return json_resp(self._gemini_batch_json(rec, ctx))

    def _gemini_batch_list(self, ctx: Ctx) -> Resp:
        self._auth(ctx)
        with self._lock:
            items = sorted((b for b in self._batches.values() if b.provider == "gemini"), key=lambda b: b.seq, reverse=True)
        page, token = self._token_page(items, ctx)
        operations = []
        for rec in page:
            self._advance(rec)
            operations.append(self._gemini_batch_json(rec, ctx))
        out: dict = {"operations": operations}
        if token:
            out["nextPageToken"] = token
        return json_resp(out)

    def _gemini_batch_cancel(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        rec = self._gemini_batch(batch_id)
        with rec.lock:  # not a look (see _openai_batch_cancel)
            if rec.state != "done":
                # Cancel stops the job at once; nothing was processed, so there is no output.
                now = time.time()
                rec.cancel_at = rec.ended_at = now
                rec.counts = {"requestCount": rec.n}
                rec.final = "BATCH_STATE_CANCELLED"
                rec.state = "done"
        return json_resp({})

    def _gemini_batch_delete(self, ctx: Ctx, batch_id: str) -> Resp:
        self._auth(ctx)
        self._gemini_batch(batch_id)
        with self._lock:
            self._batches.pop(batch_id, None)
        return json_resp({})

    def _gemini_generate(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        self._auth(ctx)
        model = model_path[len("models/"):] if model_path.startswith("models/") else model_path
        request = ctx.json()
        endpoint = f"/{version}/models/{model}:generateContent"
        custom_id = ctx.headers.get(TRACE_HEADER)
        self._log_request("gemini", model, custom_id, "online", endpoint)
        outcome = self._execute("gemini", model, request, custom_id, endpoint)
        if not outcome.ok:
            raise ApiError(outcome.status, outcome.message)
        return json_resp(wire.gemini_response(model, outcome))



class Route:
    """One API operation: an HTTP method and a path regex (full match) answered by ``handler``.

    ``raw``: match the path as sent (percent-encoded) and unquote the groups, so that an id with
    a "/" in it is one segment. ``claim``: for a path two providers share (/{ver}/batches and
    /{ver}/files exist for OpenAI and Gemini 3.x), whether this provider answers this request.
    """

    def __init__(
        self,
        method: str,
        path: str,
        handler: str,
        provider: str = "",
        raw: bool = False,
        claim: Callable[..., bool] | None = None,
    ) -> None:
        self.method = method
        self.pattern = re.compile(path)
        self.handler = handler
        self.provider = provider
        self.raw = raw
        self.claim = claim


def _gemini_batch(emu: Emulator, ctx: Ctx, batch_id: str | None = None) -> bool:
    return emu._gemini_claims(ctx, emu._batches, batch_id)


def _gemini_file(emu: Emulator, ctx: Ctx, file_id: str | None = None) -> bool:
    return emu._gemini_claims(ctx, emu._files, file_id)


def _openai_batch(emu: Emulator, ctx: Ctx, batch_id: str | None = None) -> bool:
    return emu._owner(ctx, emu._batches, batch_id) == "openai"


def _openai_file(emu: Emulator, ctx: Ctx, file_id: str | None = None) -> bool:
    return emu._owner(ctx, emu._files, file_id) == "openai"


def _openai_online(emu: Emulator, ctx: Ctx) -> bool:
    return ctx.provider == "openai"


# Tried in order; the first route whose method, path and claim match answers.
_ROUTE_LIST = [
    # Gemini: upload / download prefixes and Google custom methods
    Route("POST", r"/upload/([^/]+)/files", "_gemini_upload"),
    Route("GET", r"/(?:download/)?[^/]+/files/([^/:]+):download", "_gemini_download"),
    Route("POST", r"/([^/]+)/models/(.+):generateContent", "_gemini_generate", "gemini"),
    Route("POST", r"/([^/]+)/models/(.+):batchGenerateContent", "_gemini_batch_create", "gemini"),
    Route("POST", r"/[^/]+/batches/([^/:]+):cancel", "_gemini_batch_cancel", "gemini"),
    # Anthropic (batch ids are matched on the path as sent: an alias_batch id may hold a "/")
    Route("POST", r"/v1/messages", "_anthropic_online"),
    Route("POST", r"/v1/messages/batches", "_anthropic_create"),
    Route("GET", r"/v1/messages/batches", "_anthropic_list"),
    Route("GET", r"/v1/messages/batches/([^/]+)", "_anthropic_retrieve", raw=True),
    Route("DELETE", r"/v1/messages/batches/([^/]+)", "_anthropic_delete", raw=True),
    Route("POST", r"/v1/messages/batches/([^/]+)/cancel", "_anthropic_cancel", raw=True),
    Route("GET", r"/v1/messages/batches/([^/]+)/results", "_anthropic_results", raw=True),
    # /{ver}/batches and /{ver}/files: Gemini or OpenAI, by who owns the object
    Route("GET", r"(?:/[^/]+)*/batches", "_gemini_batch_list", "gemini", claim=_gemini_batch),
    Route("GET", r"(?:/[^/]+)*/batches/([^/]+)", "_gemini_batch_get", "gemini", claim=_gemini_batch),
    Route("DELETE", r"(?:/[^/]+)*/batches/([^/]+)", "_gemini_batch_delete", "gemini", claim=_gemini_batch),
    Route("POST", r"(?:/[^/]+)*/batches", "_openai_batch_create", claim=_openai_batch),
    Route("GET", r"(?:/[^/]+)*/batches", "_openai_batch_list", claim=_openai_batch),
    Route("GET", r"(?:/[^/]+)*/batches/([^/]+)", "_openai_batch_retrieve", claim=_openai_batch),
    Route("POST", r"(?:/[^/]+)*/batches/([^/]+)/cancel", "_openai_batch_cancel", claim=_openai_batch),
    Route("GET", r"(?:/[^/]+)*/files", "_gemini_file_list", "gemini", claim=_gemini_file),
    Route("GET", r"(?:/[^/]+)*/files/([^/]+)", "_gemini_file_get", "gemini", claim=_gemini_file),
    Route("DELETE", r"(?:/[^/]+)*/files/([^/]+)", "_gemini_file_delete", "gemini", claim=_gemini_file),
    Route("POST", r"(?:/[^/]+)*/files", "_openai_file_create", claim=_openai_file),
    Route("GET", r"(?:/[^/]+)*/files", "_openai_file_list", claim=_openai_file),
    Route("GET", r"(?:/[^/]+)*/files/([^/]+)/content", "_openai_file_content", claim=_openai_file),
    Route("GET", r"(?:/[^/]+)*/files/([^/]+)", "_openai_file_retrieve", claim=_openai_file),
    Route("DELETE", r"(?:/[^/]+)*/files/([^/]+)", "_openai_file_delete", claim=_openai_file),
    # OpenAI online (any prefix: /v1, /v4, /compatible-mode/v1 ...)
    Route("POST", r"(?s).*/(?:chat/completions|responses)", "_openai_online", claim=_openai_online),
]
ROUTES: dict[str, list[Route]] = {}
for _route in _ROUTE_LIST:
    ROUTES.setdefault(_route.method, []).append(_route)


def run_emulator(
    host: str = "127.0.0.1",
    port: int = 0,
    latency: float = 0.0,
    responder: Any = None,
    faults: Any = (),
) -> None:
    """Serve until SIGTERM/SIGINT (blocking); prints ``listening on URL`` to stderr first."""
    import signal

    stop = threading.Event()
    emulator = Emulator(host=host, port=port, latency=latency, responder=responder, faults=faults).start()
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        except ValueError:  # not the main thread: rely on KeyboardInterrupt / the caller
            pass
    print(f"listening on {emulator.url}", file=sys.stderr, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
