"""HTTP plumbing for the emulator (standard library only): bodies, requests, responses, routes.

Uploads can be large (OpenAI 200 MB files, Anthropic 256 MB batch bodies, Gemini 2 GB files), so
request bodies are read in bounded chunks: ``BodyReader`` handles ``Content-Length`` and
``Transfer-Encoding: chunked``; ``parse_multipart`` streams a ``multipart/form-data`` body and
writes file parts straight to disk, never holding more than one chunk plus a boundary in memory.

``dumps_line`` is the one JSON encoder for JSONL output: UTF-8 (no ``\\uXXXX`` for CJK) with
U+2028, U+2029 and U+0085 escaped, so that readers which split on those characters
(``str.splitlines``) still see one record per line.

``Ctx`` is one request as a route handler sees it, ``Resp`` the response it returns, ``ApiError``
an error answered in the provider's envelope, ``Route`` one operation of a provider's route table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from email.message import Message
from typing import Any, BinaryIO, Protocol
from urllib.parse import unquote

CHUNK = 1 << 20  # 1 MiB


class BodyError(Exception):
    """The request body is malformed or the client went away mid-body."""


class Readable(Protocol):
    """What BodyReader needs of the connection (``BaseHTTPRequestHandler.rfile``)."""

    def read(self, size: int, /) -> bytes: ...

    def readline(self, size: int, /) -> bytes: ...


class BodyReader:
    """Reads one request body from ``rfile`` in chunks; ``drain()`` discards what is left."""

    def __init__(self, rfile: Readable, headers: Message) -> None:
        self._rfile = rfile
        self._chunked = "chunked" in (headers.get("Transfer-Encoding") or "").lower()
        self._chunk_left = 0
        if self._chunked:
            self._left = -1
            self._done = False
        else:
            try:
                self._left = int(headers.get("Content-Length") or 0)
            except ValueError:
                raise BodyError("invalid Content-Length") from None
            self._done = self._left <= 0
        self.bytes_read = 0

    def read(self, n: int = CHUNK) -> bytes:
        """Up to ``n`` bytes of body; ``b""`` at the end."""
        if self._done:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                line = self._rfile.readline(65537)
                if not line:
                    raise BodyError("client closed the connection inside a chunked body")
                try:
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                except ValueError:
                    raise BodyError("invalid chunk size line") from None
                if size == 0:
                    while True:  # optional trailers, then the final CRLF
                        trailer = self._rfile.readline(65537)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    self._done = True
                    return b""
                self._chunk_left = size
            data = self._rfile.read(min(n, self._chunk_left))
            if not data:
                raise BodyError("client closed the connection inside a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                self._rfile.readline(3)  # CRLF after the chunk data
        else:
            data = self._rfile.read(min(n, self._left))
            if not data:
                raise BodyError("client closed the connection before sending the whole body")
            self._left -= len(data)
            if self._left <= 0:
                self._done = True
        self.bytes_read += len(data)
        return data

    def read_all(self, limit: int | None = None) -> bytearray:
        """The whole body in one bytearray (a single copy; ``json.loads`` accepts it as is)."""
        buf = bytearray()
        while True:
            data = self.read()
            if not data:
                return buf
            buf += data
            if limit is not None and len(buf) > limit:
                raise BodyError(f"body larger than {limit} bytes")

    def copy_to(self, out: BinaryIO, on_chunk: Callable[[bytes], None] | None = None) -> int:
        """Stream the rest of the body into ``out``; returns the number of bytes written."""
        total = 0
        while True:
            data = self.read()
            if not data:
                return total
            out.write(data)
            if on_chunk is not None:
                on_chunk(data)
            total += len(data)

    def drain(self) -> None:
        while self.read():
            pass


class _Scanner:
    """A window over a BodyReader that can stream bytes up to a marker."""

    def __init__(self, body: BodyReader) -> None:
        self._body = body
        self.buf = bytearray()

    def _fill(self) -> bool:
        data = self._body.read()
        if not data:
            return False
        self.buf += data
        return True

    def take(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill():
            pass
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def until(self, marker: bytes, sink: Callable[[bytes], None]) -> bool:
        """Send bytes before ``marker`` to ``sink`` and consume the marker. False if never found."""
        keep = len(marker) - 1
        while True:
            idx = self.buf.find(marker)
            if idx >= 0:
                if idx:
                    sink(bytes(self.buf[:idx]))
                del self.buf[: idx + len(marker)]
                return True
            if len(self.buf) > keep:
                cut = len(self.buf) - keep
                sink(bytes(self.buf[:cut]))
                del self.buf[:cut]
            if not self._fill():
                if self.buf:
                    sink(bytes(self.buf))
                    self.buf.clear()
                return False


class FilePart:
    """A file field of a multipart body, already written to ``path``."""

    def __init__(self, name: str, filename: str, content_type: str, path: str, size: int) -> None:
        self.name = name
        self.filename = filename
        self.content_type = content_type
        self.path = path
        self.size = size


_DISPOSITION_PARAM_RE = re.compile(r';\s*([A-Za-z0-9_*-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))')


def parse_multipart(
    body: BodyReader, content_type: str, open_file: Callable[[], tuple[str, BinaryIO]]
) -> tuple[dict[str, str], dict[str, FilePart]]:
    """Stream-parse ``multipart/form-data``.

    Text fields are returned decoded; parts with a ``filename`` are written to the file returned
    by ``open_file()`` (``(path, binary file object)``) and returned as ``FilePart``.
    """
    match = re.search(r'boundary="?([^";]+)"?', content_type or "")
    if not match:
        raise BodyError("multipart body without a boundary")
    boundary = match.group(1).encode("latin-1")
    scanner = _Scanner(body)
    fields: dict[str, str] = {}
    files: dict[str, FilePart] = {}
    # The first delimiter may sit at the very start (no preceding CRLF).
    if not scanner.until(b"--" + boundary, lambda _b: None):
        raise BodyError("multipart boundary not found")
    delimiter = b"\r\n--" + boundary
    while True:
        tail = scanner.take(2)
        if tail == b"--" or tail == b"":
            break
        if tail != b"\r\n":
            raise BodyError("malformed multipart delimiter")
        header_bytes = bytearray()

        def _collect(chunk: bytes) -> None:
            header_bytes.extend(chunk)
            if len(header_bytes) > 65536:
                raise BodyError("multipart part headers too large")

        if not scanner.until(b"\r\n\r\n", _collect):
            raise BodyError("truncated multipart part headers")
        headers: dict[str, str] = {}
        for line in header_bytes.decode("utf-8", "replace").split("\r\n"):
            if ":" in line:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
        params = {}
        for m in _DISPOSITION_PARAM_RE.finditer(headers.get("content-disposition", "")):
            params[m.group(1).lower()] = m.group(2) if m.group(2) is not None else m.group(3)
        name = params.get("name", "")
        if "filename" in params or "filename*" in params:
            filename = params.get("filename") or params.get("filename*", "").split("''")[-1] or "upload"
            path, out = open_file()
            size = 0
            try:

                def _write(chunk: bytes) -> None:
                    nonlocal size
                    out.write(chunk)
                    size += len(chunk)

                found = scanner.until(delimiter, _write)
            finally:
                out.close()
            files[name] = FilePart(name, filename, headers.get("content-type", "application/octet-stream"), path, size)
        else:
            text = bytearray()

            def _field(chunk: bytes) -> None:
                text.extend(chunk)
                if len(text) > 1 << 20:
                    raise BodyError(f"multipart field {name!r} too large")

            found = scanner.until(delimiter, _field)
            fields[name] = text.decode("utf-8", "replace")
        if not found:
            raise BodyError("truncated multipart body")
    body.drain()  # epilogue
    return fields, files


_LINE_ESCAPES = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}
_LINE_ESCAPE_RE = re.compile("[\u2028\u2029\u0085]")


def dumps_line(obj: Any) -> str:
    """Compact UTF-8 JSON for one JSONL record (no trailing newline)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    if "\u2028" in text or "\u2029" in text or "\u0085" in text:
        text = _LINE_ESCAPE_RE.sub(lambda m: _LINE_ESCAPES[m.group(0)], text)
    return text


def iter_jsonl(path: str) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_line_bytes)`` for each non-blank line, splitting on ``\\n`` only."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            raw = raw.rstrip(b"\r\n")
            if raw.strip():
                yield number, raw


# --------------------------------------------------------------------------- requests and responses


class ApiError(Exception):
    """An HTTP error answered in a provider's error envelope (``provider``: whose, if not the route's)."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None, provider: str | None = None,
        details: list | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.provider = provider
        self.details = details  # google.rpc.Status details (Gemini: ErrorInfo, BadRequest)


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


class Ctx:
    """One HTTP request as the routes see it.

    ``provider``: whose API the request is for (whose error envelope it gets); the dispatcher
    sets it from the request's look, then to the provider of the route that answers.
    ``raw_path``: the path as sent (percent-encoded); ids that contain "/" route on it.
    """

    def __init__(
        self, method: str, path: str, query: dict[str, list[str]], headers: Message, body: BodyReader,
        provider: str, host: str, raw_path: str = "",
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.provider = provider
        self.host = host
        self.raw_path = raw_path or path

    def q(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def header(self, name: str) -> str:
        """A request header, "" when absent."""
        return self.headers.get(name) or ""

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


def query_int(value: str | None, default: int, lo: int, hi: int) -> int:
    """An integer query parameter clamped to [lo, hi]; a 400 when it is not an integer."""
    try:
        return max(lo, min(hi, int(value))) if value is not None else default
    except ValueError:
        raise ApiError(400, f"Invalid integer query parameter: {value!r}") from None


class Route:
    """One API operation: an HTTP method and a path regex (full match) answered by ``handler``,
    called as ``handler(ctx, *groups)``.

    ``raw``: match the path as sent (percent-encoded) and unquote the groups, so that an id with
    a "/" in it is one segment. ``claim``: for a path two providers share (``/{ver}/batches`` and
    ``/{ver}/files`` exist for OpenAI and Gemini 3.x), whether this route answers this request,
    called as ``claim(ctx, *groups)``.
    """

    def __init__(
        self,
        method: str,
        path: str,
        handler: Callable[..., Resp],
        *,
        raw: bool = False,
        claim: Callable[..., bool] | None = None,
    ) -> None:
        self.method = method
        self.pattern = re.compile(path)
        self.handler = handler
        self.raw = raw
        self.claim = claim

    def match(self, ctx: Ctx, any_method: bool = False) -> list[str] | None:
        """The path groups when this route answers ``ctx`` (``any_method``: whatever its method)."""
        if not any_method and ctx.method != self.method:
            return None
        found = self.pattern.fullmatch(ctx.raw_path if self.raw else ctx.path)
        if found is None:
            return None
        args = [unquote(g) if self.raw else g for g in found.groups()]
        if self.claim is not None and not self.claim(ctx, *args):
            return None
        return args
