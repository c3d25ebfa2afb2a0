"""Issue 24, item 4's last gaps: no call outlives the run's time limit, a host name's resolution
and a Gemini upload's own retries included; and a real run refuses to poll in a tight loop.

Host names: `emulator.test` (RFC 6761 reserves .test: it never resolves for real). A fake
`socket.getaddrinfo` (this test's process only) answers it with 127.0.0.1, or never answers;
every other name and address goes to the real resolver, and nothing leaves loopback.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from batchrun.emulator import Emulator
from batchrun.providers import get_adapter
from conftest import KEY_ENV, Project, route, task

HOST = "emulator.test"
LIMIT = 3.0  # seconds: the run's time limit below (as test_hardening_net: the run reaches its first call well before it)
SLACK = 30.0  # as in test_hardening_net: after the limit the run still writes its report (seconds under load)

DOC = "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist.\n" * 3


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


class FakeResolver:
    """socket.getaddrinfo for HOST: 127.0.0.1 ("answer"), or a resolver that never answers
    ("hang": released with an error when the test ends). Records which thread asked."""

    def __init__(self) -> None:
        self.real = socket.getaddrinfo
        self.mode = "answer"
        self.release = threading.Event()
        self.asked_from: list[str] = []

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != HOST:
            return self.real(host, port, *args, **kwargs)
        self.asked_from.append(threading.current_thread().name)
        if self.mode == "hang":
            self.release.wait()
            raise socket.gaierror(socket.EAI_AGAIN, "the test's resolver never answered")
        return self.real("127.0.0.1", port, *args, **kwargs)


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResolver]:
    fake = FakeResolver()
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    yield fake
    fake.release.set()


def at_host(emu: Emulator, provider: str) -> str:
    """The emulator's URL for a provider's route, under the host name HOST."""
    return emu.url.replace("127.0.0.1", HOST) + get_adapter(provider).base_url_suffix


def dns_project(project: Project, emu: Emulator, providers: list[str]) -> Project:
    models = {"openai": "gpt-5.5", "anthropic": "claude-opus-4-8", "gemini": "gemini-2.5-pro"}
    project.doc("harbor.txt", DOC)
    project.tasks([task("t1", "When did the crane fail?", "harbor.txt")])
    project.config(routes={p: route(p, models[p], base_url=at_host(emu, p), allow_insecure_http=True) for p in providers}, panel=[])
    return project


# --- a host name is resolved within the run's time limit -----------------------------------------

def test_a_resolver_that_never_answers_ends_at_the_time_limit(project: Project, emulator: Emulator,
                                                             resolver: FakeResolver) -> None:
    """Before: getaddrinfo blocked the run's own thread, where the watchdog cannot reach (it shuts
    connections; there was none yet): the run lasted as long as the resolver (here, until the
    test's safety timer released it)."""
    dns_project(project, emulator, ["openai"])
    resolver.mode = "hang"
    safety = threading.Timer(LIMIT + SLACK + 5, resolver.release.set)  # so that a failing run still ends
    safety.daemon = True
    safety.start()
    started = time.monotonic()
    try:
        result = project.run("refresh", "--timeout", f"{LIMIT:g}s", "--interval", "5s")  # the floor: HOST is not this machine
    finally:
        safety.cancel()
    took = time.monotonic() - started
    assert took < LIMIT + SLACK, (took, result.output[-2000:])
    assert result.exit_code == 2, result.output[-3000:]
    assert "Traceback" not in result.output
    assert "time limit" in result.stderr, result.stderr[-2000:]
    assert resolver.asked_from and set(resolver.asked_from) == {"batchrun-resolve"}, resolver.asked_from
    assert emulator.calls == []  # nothing reached the provider: the name never resolved
    assert project.sql("PRAGMA integrity_check") == [{"integrity_check": "ok"}]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_every_providers_client_resolves_off_the_calling_thread_and_connects_by_address(provider: str, project: Project, emulator: Emulator,
                                                                                       resolver: FakeResolver) -> None:
    """Each adapter's client resolves in the bounded worker (a client built without it asks from
    the caller's own thread), then connects to the address it got: the call is answered."""
    from batchrun.providers.clients import make_client

    dns_project(project, emulator, [provider])
    r = project.load().routes[provider]
    assert get_adapter(provider).list_recent(make_client(r), r, time.time() - 60) == []
    assert resolver.asked_from and set(resolver.asked_from) == {"batchrun-resolve"}, resolver.asked_from
    assert emulator.calls, "the emulator was reached under the host name"


def test_a_call_cut_while_resolving_is_known_unsent(project: Project, emulator: Emulator, resolver: FakeResolver) -> None:
    """No connection was opened, so nothing was sent: classified "deadline" and not connected
    (a create cut there is known unsent, not uncertain)."""
    from batchrun.base import netguard
    from batchrun.base.errors import ProviderError
    from batchrun.providers.clients import make_client

    dns_project(project, emulator, ["openai"])
    r = project.load().routes["openai"]
    client = make_client(r)
    resolver.mode = "hang"
    with netguard.time_limit(time.time() + 0.3), pytest.raises(ProviderError) as failed:
        get_adapter("openai").list_recent(client, r, time.time() - 60)
    c = failed.value.classified  # type: ignore[attr-defined]
    assert (c.failure, c.connected) == ("deadline", False), c
    assert emulator.calls == []


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for HOST only (no IP address in it), and its key."""
    pytest.importorskip("cryptography")  # google-auth's dependency, so google-genai's
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_still_names_the_host_when_the_connection_goes_to_an_address(project: Project, tmp_path: Path, resolver: FakeResolver,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the TCP connect sees the address: the TLS handshake sends the name (SNI), the
    certificate is checked against the name (it holds no IP address, so a check against the
    address would fail), and the request's Host header is the name."""
    from batchrun.providers.clients import make_client

    cert, key = _self_signed(tmp_path)
    seen: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen["host"] = self.headers.get("Host")
            body = json.dumps({"object": "list", "data": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def sni(sock: Any, name: str | None, ctx: Any) -> None:
        seen["sni"] = name

    context.sni_callback = sni
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the SDK's client trusts this certificate only
        project.doc("harbor.txt", DOC)
        project.tasks([task("t1", "When did the crane fail?", "harbor.txt")])
        project.config(routes={"r": route("openai", "gpt-5.5", base_url=f"https://{HOST}:{server.server_address[1]}/v1")}, panel=[])
        client = make_client(project.load().routes["r"])
        assert client.models.list().data == []
    finally:
        server.shutdown()
        server.server_close()
    assert seen == {"sni": HOST, "host": f"{HOST}:{server.server_address[1]}"}
    assert set(resolver.asked_from) == {"batchrun-resolve"}



# --- a Gemini upload does not sleep past the time limit -----------------------------------------

def test_a_gemini_upload_does_not_sleep_past_the_time_limit(project: Project, emulator: Emulator, tmp_path: Path) -> None:
    """google-genai resends an upload chunk answered without X-Goog-Upload-Status after sleeping
    1, 2 and 4 s (_api_client._upload_fd: MAX_RETRY_COUNT 3, INITIAL_RETRY_DELAY 1,
    DELAY_MULTIPLIER 2): sleeps no hook or watchdog can cut. Before, an upload begun 1.5 s before
    the limit ended 1.5 s after it (the third chunk refused only after the 2 s sleep), up to 4 s
    after with a later limit. The emulator answers 429/5xx chunks without the header, as the
    service does; here every chunk is answered 503."""
    from batchrun.base import netguard
    from batchrun.base.errors import ProviderError
    from batchrun.providers.clients import make_client

    project.doc("harbor.txt", DOC)
    project.tasks([task("t1", "When did the crane fail?", "harbor.txt")])
    project.config(routes={"g": route("gemini", "gemini-2.5-pro")}, panel=[])
    r = project.load(emulator).routes["g"]
    adapter, client = get_adapter("gemini"), make_client(r)
    requests = tmp_path / "b1" / "requests.jsonl"
    requests.parent.mkdir()
    requests.write_text('{"key": "k1", "request": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}}\n')
    emulator.add_fault({"kind": "http_error", "status": 503, "method": "POST", "path": "^/upload/", "query": "upload_id=", "count": -1})
    limit = 1.5
    started = time.monotonic()
    with netguard.time_limit(time.time() + limit), pytest.raises(ProviderError) as failed:
        adapter.upload(client, r, requests)
    took = time.monotonic() - started
    assert took < limit + 0.5, (took, str(failed.value))
    assert [c for c in emulator.calls if c["path"].startswith("/upload/")], emulator.calls
    assert "X-Goog-Upload-Status" in str(failed.value) or "time limit" in str(failed.value), failed.value


# --- a real run does not poll in a tight loop ------------------------------------------------------

REMOTE = "https://api.provider.test/v1"  # a provider's API, as far as batchrun can tell: not this machine


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host name refused by the resolver (addresses still work): nothing leaves this machine."""
    real = socket.getaddrinfo

    def refuse(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host not in ("localhost",) and not host.replace(".", "").isdigit() and ":" not in host:
            raise socket.gaierror(socket.EAI_NONAME, f"the test's resolver refuses {host!r}")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", refuse)

@pytest.mark.parametrize("args", [("poll", "--wait", "--interval", "0"), ("refresh", "--interval", "0"),
                                  ("refresh", "--timeout", "1h", "--interval", "4.9s")])
def test_a_real_run_refuses_an_interval_below_the_floor(args: tuple[str, ...], project: Project,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a provider's API `--interval 0` polled in a loop bounded only by 429 backoff (every
    batch in flight checked each round). Refused before anything is read or sent: exit 1, the
    option, the floor and the fix named. The routes' hosts here are the providers' own, never
    reached: a provider's host under .test (RFC 6761: never resolvable), and a resolver that
    refuses every name, so that nothing could leave this machine even if the refusal failed."""
    offline(monkeypatch)
    project.doc("harbor.txt", DOC)
    project.tasks([task("t1", "When did the crane fail?", "harbor.txt")])
    project.config(routes={"gpt": route("openai", "gpt-5.5", base_url=REMOTE),
                           "local": route("gemini", "gemini-2.5-pro", base_url="http://127.0.0.1:9")}, panel=[])
    result = project.run(*args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "--interval" in result.output and "5s" in result.output and "'gpt'" in result.output, result.output
    assert "'local'" not in result.output  # a route on this machine is not what the floor protects
    assert not project.state_path.exists()  # nothing opened, nothing sent


@pytest.mark.parametrize("args", [("poll", "--interval", "0"), ("poll", "--wait", "--interval", "5s", "--timeout", "0")])
def test_an_interval_at_the_floor_or_unused_is_accepted(args: tuple[str, ...], project: Project,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`poll` without --wait checks once (its --interval is not used); 5 s is the floor itself."""
    offline(monkeypatch)
    project.doc("harbor.txt", DOC)
    project.tasks([task("t1", "When did the crane fail?", "harbor.txt")])
    project.config(routes={"gpt": route("openai", "gpt-5.5", base_url=REMOTE)}, panel=[])
    result = project.run(*args)
    assert result.exit_code == 0, result.output
    assert "0 batch(es) in flight" in result.output


def test_a_rehearsal_and_routes_on_this_machine_may_poll_as_often_as_they_like(project: Project, emulator: Emulator) -> None:
    project.doc("harbor.txt", DOC)
    project.tasks([task("t1", "When did the crane fail?", "harbor.txt")])
    project.config(routes={"gpt": route("openai", "gpt-5.5")}, panel=[])
    assert project.run("poll", "--wait", "--interval", "0", emulator=emulator).exit_code == 0  # a rehearsal
    project.rehearsing = False
    project.point_at(emulator)  # a real run, every route on this machine
    assert project.run("poll", "--wait", "--interval", "0").exit_code == 0
