"""The one place SDK clients are built, and the one place provider call failures are classified.

`make_client(route)` reads the API key from the route's environment variable at call time (keys
never reach state.db, jobs/, results/ or logs) and has the route's adapter build its SDK client
with the route's base URL.

SDK retries are switched off (`max_retries=0`) and done here instead, uniformly across the SDKs,
because the Stainless-generated SDKs (OpenAI's, Anthropic's) retry a `POST` after a dropped
connection without an idempotency key for batch creates: a create must never be retried blindly,
only through the adoption path in `submit`.

Every client is built with a `netguard.Guard`'s event hooks: its requests reach only the route's
own origin (a redirect or a URL to another host is refused before a byte goes out: "redirect"),
and inside a run's time limit no call outlives it ("deadline").
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..base import netguard
from ..base.backoff import backoff, retry_base
from ..base.errors import ConfigError, ProviderError
from ..base.redaction import know_key_variables, redact
from . import MalformedResponse, RouteView, get_adapter, read_sdk_error

T = TypeVar("T")

# Retries and waits are logged here (the CLI shows them on stderr, one line each, unless -q):
# a minute of backoff must never look like a hang.
log = logging.getLogger("batchrun")

# redirect: the call was sent to (or redirected towards) another host than the route's and refused
# there (netguard.ForeignHost); deadline: the run's time limit cut the call, or came before it.
CallFailure = Literal["transient", "uncertain", "auth", "client", "quota", "not_found", "redirect", "deadline"]


# Sent to the emulator when a rehearsal's route has no key set: it accepts any key.
REHEARSAL_KEY = "rehearsal-no-key"


def _key_value(route: RouteView) -> str:
    adapter = get_adapter(route.provider)
    # Whatever reads a key, its value is redacted everywhere.
    know_key_variables([route.api_key_env, adapter.alt_key_env or ""])
    value = os.environ.get(route.api_key_env, "")
    if not value and adapter.alt_key_env and route.api_key_env == adapter.default_key_env:
        value = os.environ.get(adapter.alt_key_env, "")  # the SDK's own alternative variable
    return value or (REHEARSAL_KEY if route.key_optional else "")


def missing_keys(routes: Sequence[RouteView]) -> dict[str, list[str]]:
    """The key variables of these routes that are not set (or empty), each with the routes that
    read it: names only, for a message (the values are neither kept nor shown). A rehearsal's
    routes need none."""
    missing: dict[str, list[str]] = {}
    for route in routes:
        if not _key_value(route):
            missing.setdefault(route.api_key_env, []).append(route.name)
    return missing


def _unsendable(value: str) -> str | None:
    """Why a key cannot be sent in an HTTP header, or None. A field value is visible ASCII with
    inner spaces, no leading or trailing whitespace (RFC 9110 section 5.5); httpx refuses a line
    break (read as a connection error, retried until the run's limit: every night) and cannot
    encode a non-ASCII character (a traceback). The key itself is never shown."""
    if value != value.strip():
        return "begins or ends with whitespace (a line break read from a key file?)"
    for i, ch in enumerate(value):
        if not " " <= ch <= "~":
            kind = "non-ASCII" if ord(ch) > 0x7F else "control"
            return f"holds a {kind} character at position {i + 1}"
    return None


def require_keys(routes: Sequence[RouteView], *, also: Sequence[RouteView] = ()) -> None:
    """Every missing key variable of these routes, named at once (not one per run), and every
    key that cannot be sent as it is. `also`: other routes that read the same variables (batches
    in flight), named with each one these miss, never a reason to fail by themselves."""
    missing = missing_keys(routes)
    if missing:
        for route in also:
            if route.api_key_env in missing and route.name not in missing[route.api_key_env]:
                missing[route.api_key_env].append(route.name)
        names = "; ".join(f"{env} (route{'s' if len(rs) > 1 else ''} {', '.join(repr(r) for r in rs)})" for env, rs in missing.items())
        raise ConfigError(
            f"{len(missing)} API key variable(s) not set: {names}.",
            "export " + " ".join(f"{env}=..." for env in missing) + " (or set api_key_env per route in the config); "
            "a rehearsal on the emulator (--emulator URL) needs none. Nothing was uploaded.")
    broken = {route.api_key_env: why for route in routes if (why := _unsendable(_key_value(route)))}
    if broken:
        raise ConfigError(
            f"{len(broken)} API key variable(s) hold a value no HTTP request can carry: "
            + "; ".join(f"{env} {why}" for env, why in broken.items()) + ".",
            "Set each to the key alone, e.g. export " + " ".join(f"{env}=\"$(tr -d '[:space:]' < keyfile)\"" for env in broken)
            + ". Nothing was sent.")


def api_key(route: RouteView) -> str:
    value = _key_value(route)
    if not value or _unsendable(value):
        require_keys([route])
    return value


# Clients built by this process, one per route (and key, timeout and environment). Building one
# costs ~25 ms, most of it the SDK's HTTP client loading the CA certificate bundle: the demo
# built 20 of them for 8 routes (0.49 s, issue 15), one per batch submitted or polled. The
# environment is part of the key because the SDKs read their own variables when a client is
# built (a *_BASE_URL when the route has no base_url, proxies, CA bundles): a process that
# changes them gets a client that sees the change. Bounded, for long-lived processes (tests).
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
_MAX_CLIENTS = 64


def make_client(route: RouteView, *, timeout: float = 600.0) -> Any:
    """The route's SDK client (built by its adapter), with the key read now and SDK retries off.

    Shared within the process: the SDK clients are safe to use from several threads."""
    key = api_key(route)
    cache_key = (repr(route), key, timeout, frozenset(os.environ.items()))
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            if len(_clients) >= _MAX_CLIENTS:
                _clients.pop(next(iter(_clients)))  # the oldest; whoever still holds it keeps using it
            adapter = get_adapter(route.provider)
            guard = netguard.Guard()
            client = adapter.make_client(route, key, timeout=timeout, hooks=guard.hooks())
            # The origin the client really sends to (the SDKs read their own *_BASE_URL variables too).
            guard.allow(adapter.client_base_url(client) or route.base_url or f"https://{adapter.default_host}")
            _refuse_loopback_from_environment(client, route)
            _clients[cache_key] = client
        return client


def _reaches_this_machine(host: str) -> bool:
    """Whether a connection to `host` stays on this machine: loopback in any spelling the
    resolver accepts (localhost., *.localhost, 127.1, ::ffff:127.0.0.1) and the unspecified
    addresses (0.0.0.0 and :: connect to this machine on Linux)."""
    import ipaddress
    import socket

    h = host.strip("[]").rstrip(".").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(h)
    except ValueError:
        try:  # inet_aton's short forms: 127.1, 2130706433
            ip = ipaddress.ip_address(socket.inet_aton(h))
        except OSError:
            return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def off_this_machine(route: RouteView) -> bool:
    """Whether a route's calls leave this machine: the host of its base_url (without one, of its
    SDK's *_BASE_URL variable, else its provider's API) is not loopback. The emulator and a local
    stand-in are on it. Nothing is built or sent."""
    from urllib.parse import urlsplit

    base = route.base_url if route.base_url is not None else os.environ.get(get_adapter(route.provider).sdk_base_url_env)
    if not base:
        return True  # the provider's own API
    try:
        host = urlsplit(base).hostname or ""
    except ValueError:
        return True
    return not _reaches_this_machine(host)


def _refuse_loopback_from_environment(client: Any, route: RouteView) -> None:
    """A route without a base_url goes where its SDK's own variable says (OPENAI_BASE_URL...).
    Pointing at this machine, that is what a rehearsal on the emulator leaves in a shell: a real
    run would record the emulator's answers as real results. A rehearsal sets every route's
    base_url (Config.with_emulator), and a local proxy can be named in the config (deliberately,
    in the file the project keeps); so such a variable is refused, before anything is sent."""
    from urllib.parse import urlparse

    if route.base_url is not None:
        return
    adapter = get_adapter(route.provider)
    base = adapter.client_base_url(client)
    parts = urlparse(base) if base else None
    if parts is not None and parts.hostname and _reaches_this_machine(parts.hostname):
        env = adapter.sdk_base_url_env
        raise ConfigError(
            f"Route {route.name!r} has no base_url, and {env} sends it to {parts.netloc.rpartition('@')[2]} on this machine, as a rehearsal "
            "on the emulator would: this real run would record the emulator's answers as real results. Nothing was sent.",
            f"Unset {env} for a real run, or rehearse with --emulator URL; if a local proxy really serves this provider, "
            f"name it in the route: base_url = \"{base}\".")


def client_host(client: Any, route: RouteView) -> str:
    """The host `client` really sends to, for the batch records (and so for provenance).

    Not `route.endpoint_host`: without a base_url in the route the SDKs take one from their own
    environment variables (each SDK's *_BASE_URL), so the config alone can name the wrong host."""
    from urllib.parse import urlparse

    base = get_adapter(route.provider).client_base_url(client)
    # Without the user:password@ an SDK's *_BASE_URL may carry: recorded and published as the
    # batches' host (the config refuses credentials in a route's base_url; the SDKs' variables
    # are read by the SDKs, not by it).
    return (urlparse(base).netloc.rpartition("@")[2] if base else "") or route.endpoint_host


@dataclass(frozen=True)
class Classified:
    failure: CallFailure
    status: int | None
    message: str
    retry_after: float | None = None
    connected: bool = True  # False: the connection itself failed (refused, DNS): nothing was sent


def classify(exc: BaseException) -> Classified | None:
    """Map an SDK exception to what it means for us; None if it is not a provider call failure."""
    name = type(exc).__name__
    module = type(exc).__module__
    foreign = netguard.cause(exc, netguard.ForeignHost)
    if isinstance(foreign, netguard.ForeignHost):
        # Certain: nothing went to the other host. A redirect is the route's own host answering.
        return Classified("redirect", foreign.status, _short(str(foreign)), connected=foreign.status is not None)
    late = netguard.cause(exc, netguard.DeadlineReached)
    if late is not None:
        return Classified("deadline", None, _short(str(late)), connected=False)  # not sent
    found = _classify(exc, name, module)
    if found is not None and found.failure in ("uncertain", "transient") and found.status in (None, 200) and netguard.passed():
        # A call without an answer once the run's time limit has passed: the watchdog cut it (or
        # its timeouts, capped at the time left, ran out). It may have reached the provider.
        return Classified("deadline", None, _short(f"cut at the run's time limit ({found.message})"), connected=found.connected)
    return found


# The errors of a local file a provider call writes (a download): never the provider's.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def _classify(exc: BaseException, name: str, module: str) -> Classified | None:
    if isinstance(exc, MalformedResponse):
        return Classified("transient", exc.status, _short(str(exc)))
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError, RecursionError)) or (
            isinstance(exc, ValueError) and "integer string conversion" in str(exc)):
        # The SDKs decode an answer's body themselves: a 200 that is not JSON (an HTML page from a
        # proxy), JSON nested too deep to decode, a number of over 4,300 digits (Python's limit
        # on int conversion, a ValueError from json), or a body that is not UTF-8 (httpx's
        # Response.json() hands json.loads the bytes, which decodes them strictly: RFC 8259
        # section 8.1) is a malformed answer, not a crash.
        return Classified("transient", 200, _short(f"the answer could not be read as JSON ({type(exc).__name__}: {exc})"))
    read = read_sdk_error(exc)  # the adapter of the SDK that raised it reads it
    if read is None and isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        # This machine's disk, not the provider: a download written to a full disk is no "connection
        # error" to retry 8 times and then to blame on the network. Raised as it is, it stops the
        # command with the full-disk message (errors.environment_error), exit 1.
        return None
    if read is None:
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)) or "httpx" in module or "httpcore" in module:
            return Classified("uncertain", None, _short(str(exc)) or name, connected=not never_connected(exc))
        return None
    if read.no_response:
        # The request may have reached the provider: a create may have happened -- unless the
        # connection was never opened.
        return Classified("uncertain", None, _short(read.message) or name, connected=not never_connected(exc))
    status, message, retry_after = read.status, read.message, read.retry_after
    if status is None:
        return Classified("uncertain", None, _short(message))
    if status in (401, 403):
        return Classified("auth", status, _short(message), retry_after)
    if status == 404:
        return Classified("not_found", status, _short(message), retry_after)
    if status == 429:
        return Classified("quota", status, _short(message), retry_after)
    if status in (408, 409) or status >= 500:
        # A 5xx on a create is uncertain too: the provider may have created the batch and failed after.
        return Classified("transient", status, _short(message), retry_after)
    return Classified("client", status, _short(message), retry_after)


def never_connected(exc: BaseException) -> bool:
    """True when the SDK failed to open a connection at all (refused, DNS): the request was never sent.

    Matched by name along the cause chain: the SDKs wrap their HTTP library's ConnectError
    (httpx, httpx2, httpcore...), which wraps the OS error.
    """
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError) or type(seen).__name__ == "ConnectError":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _short(message: str) -> str:
    # Every provider message batchrun keeps passes here: a provider may quote the key back
    # (OpenAI's 401 "Incorrect API key provided: sk-..."), so it is redacted before anything else.
    return redact(" ".join(message.split()))[:500]


def call(fn: Callable[[], T], *, what: str, route: RouteView, attempts: int = 8, retry_quota: bool = True) -> T:
    """Run an idempotent provider call, retrying transient failures with backoff.

    Raises ProviderError with the route, the URL and the provider's message when it gives up.
    Only for calls that are safe to repeat (reads, uploads, cancels): creates go through
    `submit`'s adoption path instead.
    """
    last: Classified | None = None
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised if unknown
            c = classify(exc)
            if c is None:
                raise
            last = c
            retryable = c.failure in ("transient", "uncertain") or (c.failure == "quota" and retry_quota)
            if not c.connected and _is_loopback(route):
                # Nothing listens on this machine's port (an emulator not started, a wrong port):
                # waiting will not start it. Say so now, not after minutes of silent retries.
                break
            if not retryable or attempt == attempts - 1:
                break
            delay = min(c.retry_after if c.retry_after is not None else backoff(attempt + 1, base=retry_base(), cap=60.0), 60.0)
            left = netguard.remaining()
            if left is not None and delay >= left:
                break  # the next attempt would come after the run's time limit: the next run makes it
            log.info("retry %d/%d in %.0f s: %s (%s for route %r)", attempt + 1, attempts - 1, delay,
                     c.message or c.failure, what, route.name)
            time.sleep(delay)
    assert last is not None
    raise provider_error(last, what=what, route=route)


def send_online(adapter: Any, client: Any, route: RouteView, line: dict[str, Any], custom_id: str) -> tuple[dict[str, Any], Classified | None]:
    """One online request (the sync transport's, a preflight's, a probe's), its outcome as a value:
    the result line in the batch output shape, the provider's answer or, for a failed call, its
    status and message as the adapter's `error_line` writes them (so `parse_line` reads either as
    it reads a batch's lines: one classification for runs, preflights and probes); and how the
    call failed (None: it was answered), for what a caller does about it (a deadline, a retry).
    A redirect to another host, refused by netguard (nothing went there), is written as an invalid
    request (status 400 reads as one in every adapter's error line): it blocks the route, its
    message names the host. An exception `classify` does not know is a bug: it propagates."""
    try:
        return adapter.send_online(client, route, line), None
    except Exception as exc:  # noqa: BLE001 - the provider's answer becomes a value
        c = classify(exc)
        if c is None:
            raise
        return adapter.error_line(custom_id, 400 if c.failure == "redirect" else c.status, c.message), c


def _is_loopback(route: RouteView) -> bool:
    from urllib.parse import urlparse

    host = urlparse(route.base_url or "").hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def provider_error(c: Classified, *, what: str, route: RouteView) -> ProviderError:
    where = route.base_url or route.endpoint_host
    status = f"HTTP {c.status}" if c.status else {"redirect": "refused", "deadline": "at the time limit"}.get(c.failure, "no response")
    if c.failure == "auth":
        hint = f"Check the key in {route.api_key_env} for route {route.name!r}."
    elif c.failure == "redirect":
        hint = (f"batchrun sends the key and the requests of route {route.name!r} only to the host its base URL names. "
                "Check base_url in the config: if the provider really moved, name its new address there; a proxy that "
                "redirects elsewhere is misconfigured or hostile.")
    elif c.failure == "deadline":
        hint = "The run reached its time limit (--timeout or --until) during this call; the next run resumes where it stopped."
    elif c.failure == "uncertain" and not c.connected and _is_loopback(route):
        hint = (f"Nothing is listening at {where} on this machine: start it (for a rehearsal, `batchrun emulator` "
                f"prints its URL) or correct the port. batchrun will resume where it stopped.")
    elif c.failure == "uncertain":
        hint = f"Check that {where} is reachable (network, base_url in the config). batchrun will resume where it stopped."
    elif c.failure in ("client", "not_found"):
        # A 4xx other than the key's: sending the same call again gets the same answer.
        hint = (f"The provider refused the call itself: fix what its message names for route {route.name!r} in the config "
                "(base_url, endpoint_path, completion_window, api_version), then run the command again; batchrun resumes "
                "where it stopped.")
    else:
        hint = "batchrun will resume where it stopped on the next run."
    err = ProviderError(f"{what} for route {route.name!r} at {where} failed ({status}): {c.message}", hint)
    err.classified = c  # type: ignore[attr-defined]
    # A refused connection to this machine will not go away by waiting (nothing was started on
    # that port), so no caller retries it: refresh and poll stop at once, like submit.
    err.loopback_refused = c.failure == "uncertain" and not c.connected and _is_loopback(route)  # type: ignore[attr-defined]
    return err


def is_transient(err: BaseException) -> bool:
    """A ProviderError that may go away by itself (429, 5xx, a dropped connection, the run's time
    limit): "not now"."""
    c = getattr(err, "classified", None)
    if getattr(err, "loopback_refused", False):
        return False
    return c is not None and c.failure in ("transient", "quota", "uncertain", "deadline")


def is_auth(err: BaseException) -> bool:
    """A ProviderError because the provider refused the key (401/403)."""
    c = getattr(err, "classified", None)
    return c is not None and c.failure == "auth"


def is_unreachable(err: BaseException) -> bool:
    """A ProviderError after the connection could not even be opened: a wrong or down base URL."""
    c = getattr(err, "classified", None)
    return c is not None and not c.connected and c.failure == "uncertain"


def refuses_call(err: BaseException) -> bool:
    """A ProviderError because the provider refused the call itself (a 4xx other than the key's:
    400, 404, 422, ...): the same call gets the same answer until the config is fixed."""
    c = getattr(err, "classified", None)
    return c is not None and c.failure in ("client", "not_found")


def blocks_route(err: BaseException) -> bool:
    """A ProviderError that sending again cannot cure, about the route rather than one request:
    the key refused (401/403), or a redirect to another host. The route is blocked with the
    diagnosis; the other routes go on."""
    c = getattr(err, "classified", None)
    return c is not None and c.failure in ("auth", "redirect")
