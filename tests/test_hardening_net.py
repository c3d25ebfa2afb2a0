"""Issue 24, items 1, 4, 5, 9, 10: keys never leave for another host, every call is bounded by
the run's time limit, one route's 401 stops one route, an uncertain Anthropic create is waited
for, and a disk error during online sends stops the sending.

Through the CLI, the real SDKs and the emulator (in process, latency 0). Where the emulator cannot
play the part (a provider, or a proxy in front of it, that redirects to another host, hangs, or
trickles a byte at a time) a small hostile HTTP proxy sits between batchrun and the emulator:
it forwards every call unless a rule of the test says otherwise. The other host is a listener on
another loopback address (127.0.0.2) that records every connection and every byte it is sent.
Runs that must end on time are real processes (tests/cliproc.py), so a hang cannot hang pytest.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import cliproc
from batchrun.emulator import Emulator
from batchrun.run.preflight import AT_THE_LIMIT
from conftest import KEY_ENV, Project, batch_requests, resent, route, task

SECRET = "sk-NET-7d1e0b93c2-SECRET"
DOC = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
       "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 3


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,127.0.0.2,localhost")
    monkeypatch.setenv(KEY_ENV, SECRET)


# --- the other host: records everything it is sent ----------------------------------------------


class Recorder:
    """A listener on another loopback host (127.0.0.2): every connection it accepts and every byte
    it reads is kept. It answers 404 (the trial's redirect target did), so a client that did send
    something does not wait for an answer."""

    def __init__(self) -> None:
        self.connections = 0
        self.received: list[bytes] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.2", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def netloc(self) -> str:
        return f"127.0.0.2:{self.port}"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        conn.settimeout(0.5)
        data = b""
        try:
            while True:
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data:
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                    if length is None or len(body) >= int(length.group(1)):
                        break
            with self.lock:
                self.received.append(data)
            conn.sendall(b'HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 28\r\n'
                         b'Connection: close\r\n\r\n{"error":{"code":404,"x":1}}')
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()


# --- the hostile proxy ----------------------------------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade", "te", "trailer"}


class HostileProxy:
    """Forwards every call to the emulator, unless a rule matches it (method, path regex, a header
    regex; `count` times, -1 forever). Actions: `redirect` (answer `status` with a Location on
    another host: the recorder), `answer` (`status`, `headers` and `body` as given), `cut` (forward, but close the
    connection `keep_back` bytes before the end of the answer), `hang` (read the request, answer nothing), `trickle` (answer
    "200 OK" then one byte of a header every `every` seconds, never ending the headers)."""

    def __init__(self, upstream: str, recorder: Recorder) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.recorder = recorder
        self.rules: list[dict[str, Any]] = []
        self.fired: list[tuple[str, str, str]] = []  # (action, method, path)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                body = self._body()
                rule = proxy.match(self.command, self.path, self.headers)
                self.request_body = body
                if rule is None:
                    self._forward(body)
                else:
                    getattr(self, "_" + rule["action"])(rule)

            do_GET = do_POST = do_DELETE = do_PUT = handle_one

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _cut(self, rule: dict[str, Any]) -> None:
                self._forward(self.request_body, rule)

            def _forward(self, body: bytes, rule: dict[str, Any] | None = None) -> None:
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                except (http.client.HTTPException, OSError):
                    # The emulator dropped the connection (a `drop` fault): so does the proxy.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                finally:
                    conn.close()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if rule is not None:  # `cut`: all but the last bytes of the answer, then the connection closes
                    self.wfile.write(data[:max(len(data) - rule.get("keep_back", 5), 0)])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)

            def _redirect(self, rule: dict[str, Any]) -> None:
                where = rule.get("location") or f"http://{proxy.recorder.netloc}/elsewhere{self.path}"
                self.send_response(rule.get("status", 302))
                self.send_header("Location", where)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, rule: dict[str, Any]) -> None:
                body = rule.get("body", b'{"error":{"message":"slow down","type":"rate_limit_error"}}')
                self.send_response(rule.get("status", 429))
                for k, v in rule.get("headers", {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _hang(self, rule: dict[str, Any]) -> None:
                proxy.stopping.wait(120)
                self.close_connection = True

            def _trickle(self, rule: dict[str, Any]) -> None:
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    self.wfile.flush()
                    while not proxy.stopping.wait(rule.get("every", 0.3)):
                        self.wfile.write(b"a")
                        self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # type: ignore[method-assign]  # a client hung up
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def rule(self, action: str, method: str, path: str, *, count: int = -1, header: tuple[str, str] | None = None,
             **extra: Any) -> None:
        with self.lock:
            self.rules.append({"action": action, "method": method, "path": path, "count": count, "header": header, **extra})

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()

    def match(self, method: str, path: str, headers: Any) -> dict[str, Any] | None:
        bare = path.split("?", 1)[0]
        with self.lock:
            for rule in self.rules:
                if rule["count"] == 0 or rule["method"] != method or not re.search(rule["path"], bare):
                    continue
                if rule["header"] and not re.search(rule["header"][1], headers.get(rule["header"][0]) or ""):
                    continue
                if rule["count"] > 0:
                    rule["count"] -= 1
                self.fired.append((rule["action"], method, bare))
                return rule
        return None

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def emu() -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    yield e
    e.stop()


@pytest.fixture
def recorder() -> Any:
    r = Recorder()
    yield r
    r.stop()


@pytest.fixture
def proxy(emu: Emulator, recorder: Recorder) -> Any:
    p = HostileProxy(emu.url, recorder)
    yield p
    p.stop()


def setup(project: Project, routes: dict[str, Any], *, tasks: int = 2) -> Project:
    project.doc("harbor.txt", DOC)
    project.tasks([task(f"t{i}", f"Question {i}: when did the crane fail?", "harbor.txt") for i in range(1, tasks + 1)])
    project.config(routes=routes, panel=[])
    return project


def board(project: Project) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in project.sql("SELECT * FROM leaderboard")}


def nothing_reached(recorder: Recorder) -> None:
    """The other host got no connection, so no key header and no request body."""
    assert recorder.connections == 0 and recorder.received == [], recorder.received[:1]


# --- item 1: a redirect to another host is refused, on every provider and every call --------------

OPENAI = route("openai", "gpt-5.5")
COMPATIBLE = route("openai-compatible", "qwen3.7-plus")
ANTHROPIC = route("anthropic", "claude-opus-4-8")
GEMINI = route("gemini", "gemini-2.5-pro")

REDIRECTS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # case: (the route redirected, a control route the rule does not touch, the rule)
    "openai-upload": (OPENAI, ANTHROPIC, {"method": "POST", "path": r"^/v1/files$", "status": 307}),
    "openai-create": (OPENAI, ANTHROPIC, {"method": "POST", "path": r"^/v1/batches$", "status": 307}),
    "openai-status": (OPENAI, ANTHROPIC, {"method": "GET", "path": r"^/v1/batches/batch_", "status": 302}),
    "openai-download": (OPENAI, ANTHROPIC, {"method": "GET", "path": r"^/v1/files/[^/]+/content$", "status": 302}),
    "compatible-create": (COMPATIBLE, ANTHROPIC, {"method": "POST", "path": r"^/compatible-mode/v1/batches$", "status": 308}),
    "anthropic-create": (ANTHROPIC, OPENAI, {"method": "POST", "path": r"^/v1/messages/batches$", "status": 307}),
    "anthropic-status": (ANTHROPIC, OPENAI, {"method": "GET", "path": r"^/v1/messages/batches/[^/]+$", "status": 301}),
    "anthropic-download": (ANTHROPIC, OPENAI, {"method": "GET", "path": r"/results$", "status": 303}),
    "gemini-upload-start": (GEMINI, OPENAI, {"method": "POST", "path": r"^/upload/", "status": 307,
                                             "header": ("X-Goog-Upload-Command", "start")}),
    "gemini-upload-chunk": (GEMINI, OPENAI, {"method": "POST", "path": r"^/upload/", "status": 308,
                                             "header": ("X-Goog-Upload-Command", "upload")}),
    "gemini-create": (GEMINI, OPENAI, {"method": "POST", "path": r":batchGenerateContent$", "status": 307}),
    "gemini-status": (GEMINI, OPENAI, {"method": "GET", "path": r"^/v1(beta)?/batches/(?!batch_)", "status": 302}),
    "gemini-download": (GEMINI, OPENAI, {"method": "GET", "path": r":download$", "status": 302}),
    "openai-online": ({**OPENAI, "transport": "sync"}, ANTHROPIC, {"method": "POST", "path": r"/chat/completions$", "status": 307}),
    "anthropic-online": ({**ANTHROPIC, "transport": "sync"}, OPENAI, {"method": "POST", "path": r"^/v1/messages$", "status": 307}),
    "gemini-online": ({**GEMINI, "transport": "sync"}, OPENAI, {"method": "POST", "path": r":generateContent$", "status": 307}),
}


@pytest.mark.parametrize("case", sorted(REDIRECTS))
def test_a_redirect_to_another_host_sends_it_nothing_and_blocks_the_route(case: str, project: Project, proxy: HostileProxy,
                                                                          recorder: Recorder) -> None:
    bad, control, rule = REDIRECTS[case]
    setup(project, {"bad": bad, "control": control})
    if case.endswith("-online"):
        # The rule matches every online request of the route, and the route's preflight (one
        # online request, sent before anything of it) would meet it first: the routes pass their
        # preflight before the rule is armed, so the rule meets the route's real sends. A
        # redirected preflight is test_a_redirect_of_the_preflight_to_another_host_refuses_the_route.
        assert project.run("preflight", emulator=proxy).exit_code == 0
    proxy.rule("redirect", **rule)
    result = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    assert proxy.fired, "the rule never fired: the case proves nothing"
    nothing_reached(recorder)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    # The route is blocked (or, for a batch checked or downloaded, held for this run) with a
    # diagnosis naming the other host; the other route finishes.
    blocked = [line for line in result.stderr.splitlines() if line.startswith("blocked: route 'bad'")]
    assert blocked and recorder.netloc in blocked[0] and "another host" in blocked[0], result.stderr
    rows = board(project)
    assert rows["control"]["complete"] == 1 and rows["bad"]["complete"] == 0
    assert SECRET not in result.output


@pytest.mark.parametrize("call", ["online", "listing"])
def test_a_redirect_of_the_preflight_to_another_host_refuses_the_route(call: str, project: Project, proxy: HostileProxy,
                                                                       recorder: Recorder, emu: Emulator) -> None:
    """The preflight's calls pass netguard as every call does: a redirect to another host is
    refused (nothing goes there) and the route's preflight is refused with the diagnosis naming
    the host, not "could not be checked" (sent again round after round until the run gave up)."""
    setup(project, {"bad": OPENAI, "control": ANTHROPIC})
    if call == "online":
        proxy.rule("redirect", "POST", r"^/v1/chat/completions$", status=307, count=-1)
    else:  # the listing of one batch that proves the batch API (GET /v1/batches?limit=1)
        proxy.rule("redirect", "GET", r"^/v1/batches$", status=302, count=-1)
    result = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    assert proxy.fired
    nothing_reached(recorder)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("preflight: bad → refused: ")]
    assert recorder.netloc in line and "another host" in line and 'Fix: Check base_url under [routes."bad"]' in line, line
    assert re.search(r"\] held \S+: preflight of route 'bad' refused", result.stderr) and "batch(es) held back, not sent" in result.stderr
    # Refused once in this run (the same call would be refused again): not sent round after round.
    online = [c for c in emu.calls if c["method"] == "POST" and c["path"] == "/v1/chat/completions"]
    assert len(online) == (0 if call == "online" else 1), online
    (row,) = project.sql("SELECT outcome, online, batch_api, message FROM preflights WHERE route = 'bad'")
    assert row["outcome"] == "refused" and recorder.netloc in row["message"]
    assert (row["online"] if call == "online" else row["batch_api"]).startswith("refused: the provider, or a proxy")
    # Nothing of the route was uploaded; the other route finished.
    assert not [c for c in emu.calls if c["path"] == "/v1/files"]
    assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == {"bad": "planned", "control": "collected"}
    assert board(project)["control"]["complete"] == 1


def test_an_origin_is_scheme_host_and_port_in_one_spelling() -> None:
    from batchrun.base.netguard import origin

    assert origin("https://api.openai.com/v1") == origin("https://API.openai.com.:443/v1/files?x=1") == ("https", "api.openai.com", 443)
    assert origin("https://bücher.example/v1") == origin("https://xn--bcher-kva.example/x")  # httpx writes the IDNA form
    assert origin("http://[::1]:8765") == ("http", "::1", 8765)
    assert origin("http://127.0.0.1:8765") != origin("http://127.0.0.1:8766") != origin("https://127.0.0.1:8766")
    assert origin("/relative") is None and origin("http://host:notaport/") is None


def test_a_redirect_of_the_listing_that_resolves_an_uncertain_create_sends_nothing(project: Project, proxy: HostileProxy,
                                                                                 recorder: Recorder, emu: Emulator) -> None:
    setup(project, {"bad": OPENAI, "control": ANTHROPIC})
    # The routes pass their preflight first: its listing of the batch API (GET /v1/batches) would
    # otherwise be the first call the rule below redirects; it is meant for adoption's listing.
    assert project.run("preflight", emulator=proxy).exit_code == 0
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/batches$"})  # the create's answer is lost
    proxy.rule("redirect", "GET", r"^/v1/batches$", status=302)  # ...and the listing that would find it redirects
    result = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    nothing_reached(recorder)
    assert result.exit_code == 2, result.output
    assert recorder.netloc in result.stderr and "Traceback" not in result.output
    # Whether the provider created it is still unknown: the batch is held, never created twice.
    assert [b["status"] for b in project.sql("SELECT status FROM batches WHERE route = 'bad'")] == ["creating"]
    assert board(project)["control"]["complete"] == 1
    proxy.clear()
    again = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    assert again.exit_code == 0, again.output
    assert len([c for c in emu.calls if c["method"] == "POST" and c["path"] == "/v1/batches"]) == 1


def test_a_results_url_on_another_host_is_never_called(project: Project, proxy: HostileProxy, recorder: Recorder,
                                                       emu: Emulator) -> None:
    """Not a redirect: the Anthropic SDK calls the batch's `results_url` as given, with the key."""
    setup(project, {"bad": ANTHROPIC, "control": OPENAI})
    emu.add_fault({"kind": "mangle_json", "method": "GET", "path": r"^/v1/messages/batches/[^/]+$", "count": -1,
                   "set": {"results_url": f"http://{recorder.netloc}/v1/messages/batches/x/results"}})
    result = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    nothing_reached(recorder)
    assert result.exit_code == 2, result.output
    blocked = [line for line in result.stderr.splitlines() if line.startswith("blocked: route 'bad'")]
    assert blocked and recorder.netloc in blocked[0] and "URL on another host" in blocked[0], result.stderr
    assert board(project)["control"]["complete"] == 1


def test_cancel_refuses_a_redirect_to_another_host(project: Project, proxy: HostileProxy, recorder: Recorder, emu: Emulator) -> None:
    setup(project, {"bad": ANTHROPIC})
    emu.add_fault({"kind": "slow", "latency": 60})
    assert project.run("submit", emulator=proxy).exit_code == 0
    proxy.rule("redirect", "POST", r"/cancel$", status=307)
    result = project.run("cancel", "--all", emulator=proxy)
    nothing_reached(recorder)
    assert result.exit_code == 1 and recorder.netloc in result.stderr and "Traceback" not in result.output


# --- item 5: a 401 (or a 404) while checking one route's batch blocks that route only ------------

@pytest.mark.parametrize("refusal", ["401", "403", "404-after-redirect"])
def test_a_refused_status_check_blocks_that_route_and_the_others_finish(refusal: str, project: Project, proxy: HostileProxy,
                                                                        emu: Emulator, recorder: Recorder) -> None:
    setup(project, {"bad": OPENAI, "control": ANTHROPIC,
                    "online": route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False)})
    if refusal == "404-after-redirect":  # the proxy sends the call to a path of the same host that is not there
        proxy.rule("redirect", "GET", r"^/v1/batches/batch_", status=302, location="/v1/moved-away")
    else:
        emu.add_fault({"kind": "http_error", "status": int(refusal), "method": "GET", "path": "^/v1/batches/batch_", "count": -1})
    result = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    blocked = [line for line in result.stderr.splitlines() if line.startswith("blocked: route 'bad'")]
    assert blocked, result.stderr
    if refusal == "404-after-redirect":
        assert "HTTP 404" in blocked[0]
    else:
        assert f"check the key in {KEY_ENV} for route 'bad'" in blocked[0]
    rows = board(project)
    assert rows["control"]["complete"] == 1 and rows["online"]["complete"] == 1
    assert rows["bad"]["complete"] == 0
    # The batch is still the provider's: nothing is sent again; fixed, the next run collects it.
    assert [b["status"] for b in project.sql("SELECT status FROM batches WHERE route = 'bad'")] == ["in_flight"]
    proxy.clear()
    emu.clear_faults()
    again = project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=proxy)
    assert again.exit_code == 0, again.output
    # Every request was answered once, and each route's preflight (one per route, before its
    # first upload) was sent once: the second run had no new policy to check.
    twice, preflights = resent(emu.requests)
    assert twice == 0 and preflights == Counter({"gpt-5.5": 1, "claude-opus-4-8": 1, "kimi-k2.6": 1}), emu.requests
    nothing_reached(recorder)


def test_poll_blocks_only_the_refused_route_and_exits_2(project: Project, proxy: HostileProxy, emu: Emulator) -> None:
    setup(project, {"bad": OPENAI, "control": ANTHROPIC})
    assert project.run("submit", emulator=proxy).exit_code == 0
    emu.add_fault({"kind": "http_error", "status": 401, "method": "GET", "path": "^/v1/batches/batch_", "count": -1})
    result = project.run("poll", emulator=proxy)
    assert result.exit_code == 2, result.output
    assert "blocked: route 'bad'" in result.stderr and f"check the key in {KEY_ENV}" in result.stderr
    assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == {"bad": "in_flight", "control": "downloaded"}


# --- item 4: every call is bounded by the run's time limit ----------------------------------------

def child(project: Project, *args: str, proxy: HostileProxy, timeout: float = 45) -> tuple[subprocess.CompletedProcess[str], float]:
    """batchrun ARGS as a real process (a hung call must not hang pytest); its wall time."""
    project.rehearsing = True
    cliproc.warm()  # the fork server's imports (11-15 s under load) are not the run's time
    started = time.monotonic()
    done = cliproc.run(["--config", str(project.config_path), "--emulator", proxy.url, *args], timeout=timeout)
    return done, time.monotonic() - started


LIMIT = 3.0  # seconds: the run's time limit below
# A generous bound over the limit: after it the run still collects and writes the report and the
# site (seconds on a loaded 2-core machine: 10-12 s were measured at a load average of 12). Before
# the fix these runs took the SDK's 600 s read timeout, or forever.
SLACK = 30.0


@pytest.mark.parametrize("case", ["refresh-hangs-on-status", "refresh-trickles-download", "poll-trickles-status",
                                  "refresh-hangs-online", "refresh-hangs-preflight"])
def test_a_call_that_never_finishes_ends_at_the_time_limit(case: str, project: Project, proxy: HostileProxy,
                                                           emu: Emulator) -> None:
    online = route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False, sync_concurrency=2)
    hangs_online = case in ("refresh-hangs-online", "refresh-hangs-preflight")
    routes = {"hung": online if hangs_online else OPENAI, "control": ANTHROPIC}
    setup(project, routes, tasks=4)
    if case == "refresh-hangs-online":
        # The rule below hangs every online request of the route, its preflight's too (one online
        # request, sent before anything of the route): here the routes pass their preflight
        # first, so the rule meets the real sends; refresh-hangs-preflight is the preflight's case.
        first, _ = child(project, "preflight", proxy=proxy)
        assert first.returncode == 0, first.stderr
    if case == "refresh-hangs-on-status":
        proxy.rule("hang", "GET", r"^/v1/batches/batch_")
    elif case == "refresh-trickles-download":
        proxy.rule("trickle", "GET", r"^/v1/files/[^/]+/content$", every=0.3)
    elif case == "poll-trickles-status":
        proxy.rule("trickle", "GET", r"^/v1/batches/batch_", every=0.3)
    else:  # the online requests (refresh-hangs-online) or the preflight's (refresh-hangs-preflight)
        proxy.rule("hang", "POST", r"/chat/completions$")
    if case.startswith("poll"):
        first, _ = child(project, "submit", proxy=proxy)
        assert first.returncode == 0, first.stderr
        done, took = child(project, "poll", "--wait", "--timeout", str(LIMIT), "--interval", "0.05", proxy=proxy)
    else:
        done, took = child(project, "refresh", "--timeout", f"{LIMIT:g}s", "--interval", "0.05", proxy=proxy)
    first_run = list(emu.requests)
    assert took < LIMIT + SLACK, (took, done.stderr[-3000:])
    assert proxy.fired
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "time limit" in done.stderr or "--timeout reached" in done.stderr, done.stderr[-2000:]
    assert project.sql("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    # The lock was released: the next run (the provider behaving again) gets it and finishes.
    proxy.clear()
    nxt, _ = child(project, "refresh", "--interval", "0.05", "--timeout", "60s", proxy=proxy)
    assert nxt.returncode == 0, nxt.stderr[-3000:]
    twice, preflights = resent(emu.requests)
    # Online requests cut at the limit may go out once more (at most sync_concurrency of them).
    assert twice <= (2 if case == "refresh-hangs-online" else 0), emu.requests
    # Each route's preflight reached the provider once (a hung one never reached it: the proxy
    # held it, and the next run checked the route again).
    assert preflights == Counter({routes["hung"]["model"]: 1, "claude-opus-4-8": 1}), preflights
    if case == "refresh-hangs-preflight":
        # Cut at the limit, the preflight is "could not be checked" (not a refusal, not an
        # unreachable base URL), and the route sent nothing of its own in that run.
        assert "preflight: hung → could not be checked: " in done.stderr and AT_THE_LIMIT in done.stderr, done.stderr[-2000:]
        assert not [r for r in first_run if r["model"] == "kimi-k2.6"], first_run


def test_submit_with_a_timeout_ends_at_it_when_an_upload_hangs(project: Project, proxy: HostileProxy, emu: Emulator) -> None:
    """`submit --timeout` bounds every call as refresh's does: an upload that never answers is cut
    at the limit, and submit exits 2 saying what it leaves (in flight, planned and not sent); the
    lock is released and the next submit sends what was left, nothing twice."""
    setup(project, {"hung": OPENAI})
    proxy.rule("hang", "POST", r"^/v1/files$")  # the route's upload
    # Without a preflight (the refresh cases above cut one): the upload is the first call, and hangs.
    done, took = child(project, "submit", "--no-preflight", "--timeout", f"{LIMIT:g}s", proxy=proxy)
    assert took < LIMIT + SLACK, (took, done.stderr[-3000:])
    assert proxy.fired and done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert ("submit: time limit reached with 0 batch(es) in flight and 1 planned, not sent yet; the next run picks them up\n"
            in done.stderr), done.stderr[-3000:]
    assert [b["status"] for b in project.sql("SELECT status FROM batches")] == ["planned"]
    assert project.sql("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    proxy.clear()
    again, _ = child(project, "submit", "--no-preflight", "--timeout", "60s", proxy=proxy)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [b["status"] for b in project.sql("SELECT status FROM batches")] == ["in_flight"]
    assert [c["path"] for c in emu.calls if c["method"] == "POST"] == ["/v1/files", "/v1/batches"]  # the hung upload never arrived


# --- item 9: an uncertain Anthropic create that is about to resolve is waited for ----------------

def test_an_uncertain_anthropic_create_is_waited_for_within_the_run(project: Project, emu: Emulator) -> None:
    setup(project, {"claude": ANTHROPIC})
    # The create is processed but its answer is lost; the batch it made takes a second to end.
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/messages/batches$"})
    emu.add_fault({"kind": "slow", "latency": 1.0})
    result = project.run("refresh", "--interval", "0.05", "--timeout", "60s", emulator=emu)
    assert result.exit_code == 0, result.output
    assert "adopted" in result.stderr
    creates = [c for c in emu.calls if c["method"] == "POST" and c["path"] == "/v1/messages/batches"]
    assert len(creates) == 1
    assert board(project)["claude"]["complete"] == 1


def test_an_uncertain_create_still_running_at_the_time_limit_is_left_for_the_next_run(project: Project, emu: Emulator) -> None:
    import anthropic  # noqa: F401 - imported before the clock starts (seconds on a loaded machine)

    setup(project, {"claude": ANTHROPIC})
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/messages/batches$"})
    emu.add_fault({"kind": "slow", "latency": 60.0})
    started = time.monotonic()
    result = project.run("refresh", "--interval", "0.05", "--timeout", f"{LIMIT:g}s", emulator=emu)
    assert time.monotonic() - started < LIMIT + SLACK
    assert result.exit_code == 2, result.output
    assert "time limit" in result.stderr and "checking whether the provider created it" in result.stderr
    # Whether the provider made it is still open: the next run's adoption finds it.
    assert [b["status"] for b in project.sql("SELECT status FROM batches")] == ["creating"], result.output
    creates = [c for c in emu.calls if c["method"] == "POST" and c["path"] == "/v1/messages/batches"]
    assert len(creates) == 1


# --- item 10: a disk error while sending online stops the sending ----------------------------------

def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here (needs root and CAP_SYS_ADMIN, as in CI): {proc.stderr.strip()}")


def test_a_disk_error_on_jobs_during_online_sends_resends_at_most_sync_concurrency(project: Project, emu: Emulator,
                                                                                  tmp_path: Path) -> None:
    """jobs/ on a small tmpfs that is full when the answers come back: writing the first answer
    fails. Before: the other lines were sent anyway (each answer lost, each sent again by the next
    run: 8, 6, 5... resends in the trial). Now the sending stops: at most sync_concurrency
    requests were answered and not recorded, and only those go out again."""
    disk = tmp_path / "disk"
    disk.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk))
    try:
        concurrency = 2
        setup(project, {"online": route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False,
                                        sync_concurrency=concurrency)}, tasks=8)
        cfg = json.loads(project.config_path.read_text())
        cfg["paths"]["jobs"] = str(disk / "jobs")
        project.config_path.write_text(json.dumps(cfg))
        assert project.run("submit", emulator=emu).exit_code == 0
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as f:  # every byte the disk has left
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        failed = project.run("poll", emulator=emu)
        assert failed.exit_code == 1 and "The disk is full" in failed.stderr, failed.output
        assert "Traceback" not in failed.output
        # The online requests (submit's preflight of the route, before the disk filled, aside).
        sent = len(batch_requests(emu))
        assert 1 <= sent <= concurrency, sent
        filler.unlink()
        assert project.run("poll", emulator=emu).exit_code == 0
        assert project.run("collect", emulator=emu).exit_code == 0
        counts = Counter(r["custom_id"] for r in batch_requests(emu))
        assert len(counts) == 8 and sum(n - 1 for n in counts.values()) <= concurrency, counts
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
