"""What every HTTP request of a provider call passes through: the route's own origin only, and the
run's time limit.

Two promises the SDKs do not keep by themselves, kept here for every SDK client batchrun builds
(`clients.make_client` gives each adapter's `make_client` a `Guard`'s event hooks, which the SDKs
pass to their httpx or httpx2 client):

1. **No key and no request body go to another host.** The SDKs follow redirects
   (openai-python's and anthropic-sdk-python's `DefaultHttpxClient` and google-genai's
   `SyncHttpxClient` set `follow_redirects=True`), and httpx drops only `Authorization` when a
   redirect leaves the origin: `x-api-key` and `x-goog-api-key` go along, and a 307/308 sends the
   body again (a batch create's body is every prompt and document). They also call absolute URLs a
   provider hands them (Anthropic's `results_url`, Gemini's `X-Goog-Upload-URL`). A `Guard` knows
   the route's origin (scheme, host, port: the base URL the client really uses) and refuses any
   request to another one, and any redirect that points at another one, before a byte goes out:
   `ForeignHost`, which `clients.classify` reads as the provider's refusal (the route is blocked,
   the message names the host). A redirect within the origin is followed as before.

2. **A run with a time limit ends on time.** httpx's timeouts are per operation (one read that
   waits longer than N seconds), so a server that sends a byte every few seconds keeps a call
   alive forever. Inside `time_limit(deadline)` (refresh, `poll --wait --timeout`) each request's
   timeouts are capped at the time left, a request is not started once the limit has passed
   (`DeadlineReached`), and at the limit a watchdog shuts down every connection batchrun's
   clients opened (each is registered through httpcore's `trace` extension when it connects), so
   whatever call is still running fails at once. `clients.classify` reads such a failure as
   "deadline": not now, the next run resumes.

   A host name is resolved before there is a connection to shut: `getaddrinfo` blocks in C (a
   resolver that does not answer holds it for the resolver's own timeouts and retries, or
   longer), and httpcore's connect timeout does not cover it (its sync backend calls
   `socket.create_connection`, whose timeout starts after the name is resolved). So each HTTP
   client the adapters build gets `resolve_in_time`: httpcore's network backend (the documented
   `network_backend` of its connection pools) wrapped so that a name is resolved in a worker
   thread, waited for no longer than the connect timeout and the time left, and the connection
   then opened by address. Only the TCP connect sees the address: TLS (SNI and the certificate
   check) and the Host header still use the name from the URL (httpcore passes the origin's host
   to `start_tls`, not the stream's address). Nothing global is patched: other code in the
   process resolves as before.
"""

from __future__ import annotations

import importlib
import ipaddress
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urljoin, urlsplit

Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECTS = (301, 302, 303, 307, 308)


def origin(url: str) -> Origin | None:
    """(scheme, host, port) of a URL, the port made explicit; None if it has no scheme or host."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower().rstrip(".")
    if not scheme or not host:
        return None
    if not host.isascii():
        try:  # httpx writes a request's host in its ASCII (IDNA) form; a config may name it in Unicode
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            pass
    return scheme, host, port or _DEFAULT_PORTS.get(scheme, 0)


def origin_text(o: Origin | None) -> str:
    if o is None:
        return "(no host)"
    scheme, host, port = o
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


class ForeignHost(Exception):
    """A provider call was about to reach another origin than the route's: refused, nothing sent there.

    `status` is the redirect's HTTP status, or None when the provider handed an absolute URL on
    another host (the request to the route's own host had been answered; this one was never sent)."""

    def __init__(self, target: Origin | None, own: Origin | None, status: int | None):
        self.target, self.own, self.status = target, own, status
        how = f"answered HTTP {status} with a redirect to" if status else "handed batchrun a URL on"
        super().__init__(f"the provider {how} another host, {origin_text(target)} (the route's own is {origin_text(own)}): "
                         "refused; no key and no request went there")


class DeadlineReached(Exception):
    """The run's time limit has passed: this request was not sent."""

    def __init__(self) -> None:
        super().__init__("the run's time limit was reached before this call could be sent")


class Guard:
    """The event hooks of one route's SDK client: its origin only, within the run's time limit."""

    def __init__(self) -> None:
        self.own: Origin | None = None

    def allow(self, base_url: str | None) -> None:
        """The origin the client's base URL names: the only one its requests may reach."""
        self.own = origin(base_url) if base_url else None

    def hooks(self) -> dict[str, list[Callable[[Any], None]]]:
        """httpx's `event_hooks` (the same shape in httpx and httpx2): called for every request
        the client sends, each hop of a redirect included, and every response, before its body."""
        return {"request": [self._on_request], "response": [self._on_response]}

    def _on_request(self, request: Any) -> None:
        target = origin(str(request.url))
        if target != self.own:
            raise ForeignHost(target, self.own, None)
        left = remaining()
        extensions = request.extensions
        if left is not None:
            if left <= 0:
                raise DeadlineReached()
            # httpx's timeouts (per operation) capped at the time left: a call that hangs ends at the limit.
            timeout = extensions.get("timeout") or {}
            extensions["timeout"] = {k: min(v, left) if isinstance(v, (int, float)) else left
                                     for k, v in {"connect": None, "read": None, "write": None, "pool": None, **timeout}.items()}
        extensions["trace"] = _traced(extensions.get("trace"))

    def _on_response(self, response: Any) -> None:
        location = response.headers.get("location")
        if response.status_code in _REDIRECTS and location:
            target = origin(urljoin(str(response.request.url), location))
            if target != self.own:
                raise ForeignHost(target, self.own, response.status_code)


def cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` or the first exception of `kind` along its cause chain: an SDK may wrap what an event
    hook raised (openai-python 1.55 raises APIConnectionError from it; 3.x lets it through)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


# --- the run's time limit -------------------------------------------------------------------

_lock = threading.Lock()
_deadlines: list[float] = []  # the time limits in force (epoch seconds); the nearest applies
_timer: threading.Timer | None = None
_sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()  # every connection batchrun's clients opened


def deadline() -> float | None:
    """The run's time limit in epoch seconds, or None without one."""
    with _lock:
        return min(_deadlines) if _deadlines else None


def remaining() -> float | None:
    limit = deadline()
    return None if limit is None else limit - time.time()


def passed() -> bool:
    left = remaining()
    return left is not None and left <= 0


@contextmanager
def time_limit(limit: float | None) -> Iterator[None]:
    """Every provider call made inside ends by `limit` (epoch seconds; None: no limit)."""
    if limit is None:
        yield
        return
    with _lock:
        _deadlines.append(limit)
        _arm()
    try:
        yield
    finally:
        with _lock:
            _deadlines.remove(limit)
            _arm()


def _arm() -> None:
    """(Re)start the watchdog for the nearest limit. Called with _lock held."""
    global _timer
    if _timer is not None:
        _timer.cancel()
        _timer = None
    if _deadlines:
        _timer = threading.Timer(max(min(_deadlines) - time.time(), 0.0), _cut_all)
        _timer.daemon = True
        _timer.name = "batchrun-deadline"
        _timer.start()


def _cut_all() -> None:
    """At the limit: shut down every connection, so a read or write in progress fails now."""
    with _lock:
        if not _deadlines:
            return
        if min(_deadlines) > time.time() + 0.05:
            _arm()  # early by the wall clock (the timer counts monotonic time): wait for the rest
            return
        sockets = list(_sockets)
    for sock in sockets:
        _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _traced(inner: Callable[[str, dict[str, Any]], Any] | None) -> Callable[[str, dict[str, Any]], Any]:
    """httpcore's `trace` extension: each connection a request opens (TCP, then TLS over it) is
    registered, so the watchdog can shut it down."""
    if getattr(inner, "_batchrun", False):
        return inner  # type: ignore[return-value]

    def trace(name: str, info: dict[str, Any]) -> Any:
        if name.endswith(("connect_tcp.complete", "start_tls.complete", "connect_unix_socket.complete")):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with _lock:
                    _sockets.add(sock)
                if passed():
                    _shut(sock)
        return inner(name, info) if inner is not None else None

    trace._batchrun = True  # type: ignore[attr-defined]
    return trace


# --- name resolution within the run's time limit ---------------------------------------------

def resolve_in_time(http_client: Any) -> int:
    """Make every connection pool of an httpx (or httpx2) client resolve host names within the
    connect timeout and the run's time limit (see the module docstring); the number of pools
    changed. The pools are the client's transport and its proxy mounts (`_transport`, `_mounts`:
    httpx has no public way to give a client's pools a network backend, though httpcore's pools
    take one); a client of another shape is left as it is (0)."""
    transports = [getattr(http_client, "_transport", None), *(getattr(http_client, "_mounts", None) or {}).values()]
    changed = 0
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None or isinstance(backend, _ResolveInTime) or not hasattr(backend, "connect_tcp"):
            continue
        pool._network_backend = _ResolveInTime(backend)  # type: ignore[union-attr]
        changed += 1
    return changed


class _ResolveInTime:
    """An httpcore (or httpcore2) sync network backend: `inner`'s, with the host name resolved in
    a worker thread that is waited for no longer than the connect timeout and the time left, then
    each address tried in turn (as `socket.create_connection` does)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        # The httpcore package `inner` belongs to: its ConnectError/ConnectTimeout are what httpx
        # maps to its own (and the SDKs to their connection errors).
        self._errors = importlib.import_module(type(inner).__module__.partition(".")[0])

    def connect_tcp(self, host: str, port: int, **kwargs: Any) -> Any:
        # kwargs as httpcore passes them (timeout, local_address, socket_options), handed on as they are.
        if _is_address(host):
            return self._inner.connect_tcp(host, port, **kwargs)
        timeout = kwargs.get("timeout")
        last: Exception | None = None
        for address in self._resolve(host, timeout):
            try:
                return self._inner.connect_tcp(address, port, **{**kwargs, "timeout": _capped(timeout)})
            except (self._errors.ConnectError, self._errors.ConnectTimeout) as e:
                last = e
                if passed():
                    break
        raise last if last is not None else self._errors.ConnectError(f"no address for {host!r}")

    def _resolve(self, host: str, timeout: float | None) -> list[str]:
        wait = _capped(timeout)
        if wait is not None and wait <= 0:
            raise self._errors.ConnectError(f"no time left to resolve {host!r}: nothing was sent")
        found: dict[str, Any] = {}

        def work() -> None:
            try:
                # Looked up at call time: socket.getaddrinfo as socket.create_connection calls it.
                found["infos"] = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                found["error"] = e

        # A daemon thread: a resolver that never answers holds only this thread, and never the
        # process's exit (a ThreadPoolExecutor's workers are joined at exit).
        worker = threading.Thread(target=work, name="batchrun-resolve", daemon=True)
        worker.start()
        worker.join(wait)
        if worker.is_alive():
            # A ConnectError (not a timeout): no connection was opened, so nothing was sent, which
            # is what clients.never_connected tells a create that may be sent again from.
            raise self._errors.ConnectError(f"resolving {host!r} took longer than {wait:.3g} s: nothing was sent")
        if "error" in found:
            raise self._errors.ConnectError(f"resolving {host!r}: {found['error']}") from found["error"]
        return list(dict.fromkeys(str(info[4][0]) for info in found["infos"]))  # in the resolver's order, once each

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.connect_unix_socket(*args, **kwargs)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _capped(timeout: float | None) -> float | None:
    """A connect timeout capped at the run's time left (None: neither limits it)."""
    left = remaining()
    if left is None:
        return timeout
    return left if timeout is None else min(timeout, left)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
