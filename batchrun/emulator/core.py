"""The shared batch core: files, batches and their lifecycle, latency, the logs, the fault hooks.

Every provider module (``openai.py``, ``anthropic.py``, ``gemini.py``) is a ``Provider``: it owns
its routes, auth and wire shapes, and uses one ``Core`` for state; the handlers their batch and
Files APIs share are ``batches.BatchApi`` and ``files.FileApi``, on this core.

Batch lifecycle. Every batch gets ``ready_at = created + latency`` (a ``slow`` fault overrides the
latency). A retrieve / list / results call is a *look* (``Core.advance``): at or after
``ready_at`` it processes the batch exactly once (under the batch's lock): each request is
validated, checked against request faults, answered by the responder and written to the
provider's native result form on disk (``Provider.process``). ``state`` is ``pending``, then
``cancel_requested`` (a user cancel before processing) or straight ``done``; how a state looks on
the wire (``validating``, ``in_progress``, ``BATCH_STATE_RUNNING`` ...) is the provider's business,
and ``final`` holds the provider's word for how it ended.

Logs: ``requests`` holds every accepted request (each batch line at create time, in file order,
and every online call; the ``X-Batchrun-Custom-Id`` header names an online call's custom_id);
``calls`` holds every HTTP call with the status sent (0 = connection dropped).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, ClassVar, Literal

from . import wire
from .faults import FaultSet, check_seconds
from .httpio import ApiError, Ctx, Resp, Route, json_resp
from .models import Models
from .responder import load_responder
from .windows import Windows
from .wire import Outcome

# Headers on every deliberate 429/5xx. Both Stainless SDKs (openai, anthropic) only honour a
# server delay when it is > 0 (`0 < retry_after`); "0" falls back to exponential backoff (0.5 s, 1 s,
# ...). `retry-after-ms: 1` is read first and makes the retry effectively immediate.
RETRY_HEADERS = [("retry-after", "0"), ("retry-after-ms", "1")]

# Online calls have no custom_id on the wire. batchrun's sync transport sends this header so
# that the request log (and custom_id fault matchers / responders) can tie a call to its request.
TRACE_HEADER = "X-Batchrun-Custom-Id"
# A provider that shows a finalizing phase (``Provider.finalizes``) is in it for the last tenth of
# a batch's latency: every request answered, the results not yet published.
FINALIZING = 0.9

# How a batch ends, before a provider names it (Provider.final_status).
End = Literal["completed", "failed", "expired", "cancelled"]


@dataclass
class FileRec:
    id: str
    provider: str  # "openai" | "gemini" (Anthropic results are served as a FileRec too)
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
    """A batch as the core sees it; each provider module subclasses it with its own fields."""

    provider: ClassVar[str] = ""
    id: str
    model: str
    endpoint: str
    source_path: str  # JSONL of the requests, private to this batch
    n: int
    seq: int = 0  # creation order (lists are newest first)
    created: float = 0.0
    ready_at: float = 0.0
    # batch-level fault effects, decided at create
    expire_fraction: float | None = None
    cancel_fraction: float | None = None
    invalid: bool = False  # fails validation as a whole (a fault, or input the provider refused)
    quota: bool = False  # refused for quota: ends failed at its first look
    # lifecycle
    state: Literal["pending", "cancel_requested", "done"] = "pending"
    looks: int = 0
    final: str | None = None  # the provider's name for how it ended (Provider.final_status)
    in_progress_at: float | None = None
    finalizing_at: float | None = None
    ended_at: float | None = None
    cancel_at: float | None = None
    counts: dict = field(default_factory=dict)  # the provider's request counts, once done
    # Outcomes of the first requests, answered while the batch runs (Provider.progress), in file
    # order: reported in the provider's running counts, and kept, not answered again, at the end.
    answered: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Provider(ABC):
    """One provider's API: routes, auth, wire shapes, and how its batches are processed.

    Adding a provider is one module with a Provider subclass (a ``batches.BatchApi``, and a
    ``files.FileApi`` when it has a Files API; with its BatchRec subclass), and its place in
    ``Emulator.__init__``."""

    name: ClassVar[str] = ""
    # Whether a batch that will complete first shows a finalizing phase (its requests all done, its
    # results being prepared: OpenAI's "finalizing", openai.py).
    finalizes: ClassVar[bool] = False

    def __init__(self, core: Core) -> None:
        self.core = core

    @abstractmethod
    def routes(self) -> list[Route]:
        """The operations this provider answers, tried in order."""

    def looks_like(self, path: str, headers: Message, query: dict[str, list[str]]) -> bool:
        """Whether a request is for this API by its look (path markers, headers), before any
        route claims it: whose envelope an HTTP fault or an unknown route gets."""
        return False

    @abstractmethod
    def auth(self, ctx: Ctx) -> None:
        """Raise the provider's ApiError when the call carries no usable credential."""

    @abstractmethod
    def error_body(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
        """The provider's error envelope."""

    def error_response(self, exc: ApiError) -> Resp:
        headers = list(RETRY_HEADERS) if exc.status == 429 or exc.status >= 500 else []
        return json_resp(self.error_body(exc.status, exc.message, exc.param, exc.code), exc.status, headers)

    @abstractmethod
    def process(self, rec: BatchRec, limit: int, end: End) -> None:
        """Answer the first ``limit`` requests of a batch that ends ``end`` and write its results."""

    def outgoing(self, ctx: Ctx, resp: Resp) -> None:
        """Last touches on any response to a request of this provider's (faults' included)."""

    def fail(self, rec: BatchRec) -> None:
        """Record why a batch failed as a whole (``rec.quota`` / ``rec.invalid``)."""

    def final_status(self, end: End) -> str:
        """How the provider names the way a batch ended (``BatchRec.final``)."""
        return end

    @abstractmethod
    def too_long(self, model: str, tokens: int, window: int, params: Any) -> Outcome:
        """How the provider refuses a request of ``tokens`` input tokens over a ``window``-token
        model (see windows.py), online and as a batch line alike."""

    def progress(self, rec: BatchRec, fraction: float) -> None:
        """A look at a running batch ``fraction`` of the way to ready (with ``rec.lock`` held): a
        provider whose batches report running counts answers its first requests now, so the counts
        it reports are true. The default answers nothing until the end."""

    def reset(self) -> None:
        """Forget provider-specific state (see ``Core.reset``)."""


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


class Core:
    """State shared by every provider: files, batches, logs, latency, responder and faults.

    ``lock`` guards the dicts and logs; each batch has its own lock for processing.
    """

    def __init__(
        self, latency: float = 0.0, responder: Any = None, faults: Any = (), windows: Any = None, models: Any = (), keys: Any = None,
    ) -> None:
        self.responder = load_responder(responder)
        self.windows = Windows(windows)
        self.models = Models(models or ())
        # The API keys the providers accept (``--key``); None: any non-empty key, as before.
        self.keys: frozenset[str] | None = frozenset(keys) if keys else None
        self.latency = check_seconds(latency)
        self.faults = FaultSet()
        for fault in faults or ():
            self.faults.add(json.loads(fault) if isinstance(fault, str) else fault)  # CLI passes JSON text
        self.lock = threading.Lock()
        # The credential of the HTTP call being handled, per handler thread: batch lines are
        # processed inside the retrieve/results call that finds them due (echo_key_request).
        self._call_local = threading.local()
        self.dir = tempfile.mkdtemp(prefix="batchrun-emulator-")
        self.files: dict[str, FileRec] = {}
        self.batches: dict[str, BatchRec] = {}
        self.providers: dict[str, Provider] = {}
        self._requests: list[dict] = []
        self._calls: list[dict] = []
        self._seq = 0
        self._batch_seq = 0

    # ------------------------------------------------------------------ logs

    @property
    def requests(self) -> list[dict]:
        with self.lock:
            return [dict(r) for r in self._requests]

    @property
    def calls(self) -> list[dict]:
        with self.lock:
            return [dict(c) for c in self._calls]

    def record_call(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self._calls.append({"method": method, "path": path, "status": status})

    def log_request(self, provider: str, model: str, custom_id: Any, batch: str, endpoint: str) -> None:
        with self.lock:
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

    def key_refused(self, key: str) -> bool:
        """Whether a presented key is refused: only when keys were given (``--key``) and it is none of them."""
        return self.keys is not None and key not in self.keys

    @property
    def credential(self) -> str:
        """The credential the HTTP call being handled on this thread presented."""
        return getattr(self._call_local, "credential", "")

    @credential.setter
    def credential(self, value: str) -> None:
        self._call_local.credential = value

    def reset(self) -> None:
        """Forget all files, batches, logs and faults (latency and responder stay)."""
        with self.lock:
            self.files.clear()
            self.batches.clear()
            self._requests.clear()
            self._calls.clear()
            self._seq = 0
        for provider in self.providers.values():
            provider.reset()
        self.faults.clear()
        for name in os.listdir(self.dir):
            try:
                os.unlink(os.path.join(self.dir, name))
            except OSError:
                pass

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ files

    def new_path(self, prefix: str) -> str:
        fd, path = tempfile.mkstemp(prefix=prefix, dir=self.dir)
        os.close(fd)
        return path

    def add_file(self, rec: FileRec) -> FileRec:
        with self.lock:
            self.files[rec.id] = rec
        return rec

    def delete_file(self, rec: FileRec) -> None:
        with self.lock:
            self.files.pop(rec.id, None)
        try:
            os.unlink(rec.path)
        except OSError:
            pass

    def link_private(self, src: str, prefix: str) -> str:
        """A batch's own name for an input file (a hard link: no copy, survives file deletion)."""
        dest = os.path.join(self.dir, prefix + wire.lower_id(16))
        try:
            os.link(src, dest)
        except OSError:
            shutil.copyfile(src, dest)
        return dest

    def download(self, rec: FileRec, content_type: str) -> Resp:
        """Stream a file; a ``truncate`` fault cuts a result file inside its last line."""
        length = rec.size
        if rec.generated and self.faults.take("truncate", {"provider": rec.provider}) is not None:
            length = truncated_length(rec.path, rec.size)
        return Resp(200, content_type=content_type, file_path=rec.path, file_length=length)

    # ------------------------------------------------------------------ batches

    def owner(self, store: dict[str, Any], ident: str | None, ctx: Ctx) -> str:
        """Who answers a path shared by two providers: the creator of the object it names, else
        the provider the request looks like."""
        rec = store.get(ident) if ident else None
        return rec.provider if rec is not None else ctx.provider

    def batch_faults(self, provider: str, model: str) -> dict:
        """Consume the batch-level faults that match a batch being created."""
        info = {"provider": provider, "model": model}
        # A refused or failed batch never runs, so it does not use up expire/cancel/slow faults.
        for kind in ("quota", "fail_validation"):
            fault = self.faults.take(kind, info)
            if fault is not None:
                return {kind: fault}
        found = {}
        for kinds in (("expire", "cancel"), ("slow",)):  # expire and cancel exclude each other
            fault = self.faults.take(set(kinds), info)
            if fault is not None:
                found[fault["kind"]] = fault
        return found

    def add_batch(self, rec: BatchRec, faults: dict) -> BatchRec:
        """Register a new batch: creation time, ``ready_at`` and the effects of its faults."""
        now = time.time()
        latency = float(faults["slow"]["latency"]) if "slow" in faults else self.latency
        with self.lock:
            self._batch_seq += 1
            rec.seq = self._batch_seq
        rec.created, rec.ready_at = now, now + latency
        if "expire" in faults:
            rec.expire_fraction = float(faults["expire"]["complete_fraction"])
        elif "cancel" in faults:
            rec.cancel_fraction = float(faults["cancel"]["complete_fraction"])
        rec.invalid = rec.invalid or "fail_validation" in faults
        rec.quota = "quota" in faults
        with self.lock:
            self.batches[rec.id] = rec
        return rec

    def advance(self, rec: BatchRec) -> None:
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
            else:
                if rec.looks >= 2 and rec.in_progress_at is None:
                    rec.in_progress_at = now
                if rec.in_progress_at is not None and not rec.invalid:
                    span = rec.ready_at - rec.created
                    fraction = (now - rec.created) / span if span > 0 else 1.0
                    provider = self.providers[rec.provider]
                    if provider.finalizes and fraction >= FINALIZING and rec.expire_fraction is None and rec.cancel_fraction is None:
                        rec.finalizing_at = rec.finalizing_at or now
                        fraction = 1.0
                    provider.progress(rec, fraction)

    def request_cancel(self, rec: BatchRec) -> None:
        """A user cancel (with ``rec.lock`` held): the next look ends the batch, unprocessed.

        A cancel is not a look: a batch that nobody has retrieved since it became ready is still
        cancellable, and then nothing is processed."""
        if rec.state == "pending":
            rec.state = "cancel_requested"
            rec.cancel_at = time.time()

    def _finish(self, rec: BatchRec, now: float, cancelled_by_user: bool = False) -> None:
        """Process a batch (with ``rec.lock`` held) and move it to its terminal state."""
        rec.in_progress_at = rec.in_progress_at or now
        end: End = "completed"
        limit = rec.n
        if cancelled_by_user:
            limit, end = len(rec.answered), "cancelled"  # what ran before the cancel stays answered
        elif rec.quota or rec.invalid:
            limit, end = 0, "failed"
        elif rec.expire_fraction is not None:
            limit, end = math.floor(rec.expire_fraction * rec.n), "expired"
        elif rec.cancel_fraction is not None:
            limit, end = math.floor(rec.cancel_fraction * rec.n), "cancelled"
            rec.cancel_at = rec.cancel_at or now
        provider = self.providers[rec.provider]
        if end == "failed":
            provider.fail(rec)
        else:
            provider.process(rec, limit, end)
        rec.finalizing_at = rec.finalizing_at or time.time()
        rec.ended_at = time.time()
        rec.final = provider.final_status(end)
        rec.state = "done"

    # ------------------------------------------------------------------ requests

    def respond(self, provider: str, model: str, params: Any, custom_id: Any, prompt: str) -> Outcome:
        """Answer one request the provider has validated: request faults, then the responder."""
        info = {"provider": provider, "model": model, "custom_id": custom_id, "prompt_contains": prompt}
        fault = self.faults.take("request_error", info)
        if fault is not None:
            status = int(fault["status"])
            default = {429: "Rate limit reached (emulator fault).", 529: "Overloaded (emulator fault)."}.get(
                status, f"Internal server error (emulator fault, status {status})."
            )
            return Outcome.error(status, fault.get("message") or default)
        echo = self.faults.take("echo_key_request", info)
        credential = self.credential
        if echo is not None and "status" in echo:
            return Outcome.error(int(echo["status"]), f"Request failed for credential {credential} (emulator echo_key_request fault).")
        window = self.windows.get(model)
        if window is not None:
            tokens = wire.count_input_tokens(prompt)
            if tokens > window:
                return self.providers[provider].too_long(model, tokens, window, params)
        if self.faults.take("garbage", info) is not None:
            reply: Any = wire.GARBAGE_ANSWER
        else:
            request = {"provider": provider, "model": model, "prompt": prompt, "params": params, "custom_id": custom_id}
            try:
                reply = self.responder(request)
            except Exception as exc:  # a broken user responder is a server error for that request
                traceback.print_exc(file=sys.stderr)
                return Outcome.error(500, f"responder raised {exc!r}")
        if echo is not None:
            reply = f"{reply if isinstance(reply, str) else ''} The key you sent: {credential}"
        return _outcome(reply, prompt)

    def corrupt(self, provider: str, model: str, custom_id: Any, line: str) -> str:
        """A result line as written, or as a ``corrupt_line`` fault rewrites it."""
        fault = self.faults.take("corrupt_line", {"provider": provider, "model": model, "custom_id": custom_id})
        if fault is None:
            return line
        return str(fault["line"]).replace("$CUSTOM_ID", str(custom_id))


def _outcome(reply: Any, prompt: str) -> Outcome:
    """The responder's reply (see responder.py) as an Outcome with usage counted."""
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
    return Outcome(kind, text=text, input_tokens=wire.count_input_tokens(prompt), output_tokens=wire.count_output_tokens(text))
