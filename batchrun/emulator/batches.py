"""The batch/route core the providers share: the batch handlers, once, over ``core.py``'s state.

A provider module (``openai.py``, ``anthropic.py``, ``gemini.py``; ``dashscope.py`` on
``openai.py``) is a ``BatchApi``: it names these handlers in its own route table and supplies only
what is its own: its paths, auth, id forms, the wire shape of a batch (``batch_json``) and of a
list page (``batch_page``), how it reads a batch's input back (``batch_lines``) and answers one
line (``answer_line``, over its ``*_rules.py``), and its quirks, each where the provider says so.
The flow it fills in:

* create: the provider validates the body (its own shapes) and writes the batch's private input;
  ``batch_faults`` takes the batch-level faults (a provider that refuses quota or validation at
  create raises it there: ``refused_at_create``) and ``admit`` logs the accepted requests and
  registers the batch, before anyone can see it.
* retrieve, list (and a provider's results): each is a look (``Core.advance``), then the shape.
* cancel: an ended batch gets the provider's ``cancel_ended``; a running one ``cancel`` (by
  default ``Core.request_cancel``: the next look ends it, with what ran kept).
* delete: the provider's rule (``deletable``), then the batch is forgotten.
* processing: ``outcomes`` answers the input lines in file order (those answered while the batch
  ran are kept), and says what became of the lines past the end (``unprocessed``); ``progress``
  answers ahead for a provider whose counts move while a batch runs; ``ResultFile`` writes the
  provider's result lines through the ``corrupt_line`` fault and registers the file.
* online: ``answer_online`` logs the call and turns a refusal into the provider's HTTP error.

The Files API handlers (OpenAI's and Gemini's) are in ``files.py``.
"""

from __future__ import annotations

import math
import os
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from .core import TRACE_HEADER, BatchRec, End, FileRec, Provider
from .httpio import ApiError, Ctx, Resp, dumps_line, json_resp
from .wire import Outcome

# One list page in a provider's pagination style: the slice of the listed ids it shows, and how
# it wraps the rendered entries in the provider's envelope (cursor fields, page token ...).
Paged = tuple[slice, Callable[[list[dict]], dict]]


def refused(outcome: Outcome) -> ApiError:
    """A refusal (an error Outcome from a provider's rules) as the HTTP error that answers it."""
    return ApiError(outcome.status, outcome.message, outcome.param, outcome.code, details=outcome.details)


def first_last(data: list[dict]) -> dict:
    """The ``first_id`` / ``last_id`` of a cursor page (OpenAI's and Anthropic's lists)."""
    return {"first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}


@dataclass(frozen=True)
class BatchLine:
    """One request of a batch as its provider reads the input back: the custom id (Gemini's
    ``key``), the model, the request body, the endpoint it goes to, and metadata to echo."""

    custom_id: Any
    model: str
    request: Any
    endpoint: str = ""
    metadata: dict | None = None


class ResultFile:
    """A result file being written: one provider-shaped record a line, each through the
    ``corrupt_line`` fault; then kept as a generated file (``keep``) or dropped (``discard``)."""

    def __init__(self, provider: Provider, prefix: str) -> None:
        self.core, self.provider = provider.core, provider.name
        self.path = self.core.new_path(prefix)
        self.lines = 0
        self._out = open(self.path, "w", encoding="utf-8", newline="\n")

    def __enter__(self) -> ResultFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._out.close()

    def write(self, line: BatchLine, record: dict) -> None:
        # Exactly one "\n" per record: the anthropic SDK's JSONL decoder chokes on blank lines.
        self._out.write(self.core.corrupt(self.provider, line.model, line.custom_id, dumps_line(record)) + "\n")
        self.lines += 1

    def keep(self, file_id: str, filename: str, purpose: str, created: float | None = None, **fields: Any) -> FileRec:
        """Register the written file under ``file_id`` (generated: ``truncate`` faults apply)."""
        created = time.time() if created is None else created
        size = os.path.getsize(self.path)
        return self.core.add_file(FileRec(file_id, self.provider, self.path, size, filename, purpose, created, generated=True, **fields))

    def discard(self) -> None:
        os.unlink(self.path)


class BatchApi(Provider):
    """A provider with a batch API: the handlers here, the shapes and rules in the subclass."""

    batch_cls: ClassVar[type[BatchRec]] = BatchRec
    # Whether the provider's request counts move while a batch runs (``progress``).
    running_counts: ClassVar[bool] = False

    # ------------------------------------------------------------------ the provider's part

    @abstractmethod
    def batch_missing(self, batch_id: str) -> ApiError:
        """The provider's 404 for a batch id it does not hold."""

    @abstractmethod
    def batch_json(self, rec: Any, ctx: Ctx, shown_id: str) -> dict:
        """A batch as the provider shows it (``shown_id``: the id it was asked by)."""

    @abstractmethod
    def batch_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        """One page of a batch listing (``ids`` newest first) in the provider's pagination style."""

    @abstractmethod
    def batch_lines(self, rec: Any) -> Iterator[BatchLine]:
        """A batch's requests read back from its private input, in file order."""

    @abstractmethod
    def answer_line(self, rec: Any, line: BatchLine) -> Outcome:
        """Validate and answer one request of a batch (the provider's rules, then the responder)."""

    def refused_at_create(self, faults: dict, model: str) -> ApiError | None:
        """The HTTP error a create answers when the provider refuses a batch-level fault (quota,
        failed validation) at once; None: the batch is created and fails at its first look."""
        return None

    def unprocessed(self, end: End) -> Outcome | None:
        """What a request that never ran becomes in a batch that ended ``end`` (None: it is left
        out of the results, and so are those after it)."""
        return None

    def cancel_ended(self, rec: Any, batch_id: str) -> ApiError | None:
        """The error a cancel of an ended batch answers (None: it answers as a cancel would)."""
        return None

    def cancel(self, rec: Any) -> None:
        """A user cancel of a running batch (with ``rec.lock`` held)."""
        self.core.request_cancel(rec)

    def cancel_answer(self, rec: Any, ctx: Ctx, batch_id: str) -> dict:
        return self.batch_json(rec, ctx, batch_id)

    def deletable(self, rec: Any, batch_id: str) -> None:
        """Raise the provider's error when a batch may not be deleted yet."""

    def deleted_answer(self, batch_id: str) -> dict:
        """The body of a delete's answer; empty unless the provider names the deleted object."""
        return {}

    # ------------------------------------------------------------------ lookups

    def holds(self, rec: BatchRec) -> bool:
        return isinstance(rec, self.batch_cls) and rec.provider == self.name

    def batch(self, batch_id: str) -> Any:
        """The batch the path names (by the id it was asked by: an alias names its batch too)."""
        rec = self.core.batches.get(batch_id)
        if rec is None or not self.holds(rec):
            raise self.batch_missing(batch_id)
        return rec

    def owns_batch(self, ctx: Ctx, batch_id: str | None = None) -> bool:
        """Route claim on a batch path two providers share (see ``Core.owner``)."""
        return self.core.owner(self.core.batches, batch_id, ctx) == self.name

    # ------------------------------------------------------------------ create

    def batch_faults(self, model: str, source: str) -> dict:
        """Take the batch-level faults of a batch being created; a refusal at create
        (``refused_at_create``) leaves nothing behind, not even its input."""
        faults = self.core.batch_faults(self.name, model)
        error = self.refused_at_create(faults, model)
        if error is not None:
            os.unlink(source)
            raise error
        return faults

    def admit(self, rec: BatchRec, faults: dict, accepted: Iterable[tuple[str, Any, str]]) -> BatchRec:
        """Register a created batch. Its requests ((model, custom_id, endpoint) each) are logged
        as accepted before it becomes visible to retrieve/list; a batch refused for quota never
        accepted them."""
        if "quota" not in faults:
            for model, custom_id, endpoint in accepted:
                self.core.log_request(self.name, model, custom_id, rec.id, endpoint)
        return self.core.add_batch(rec, faults)

    # ------------------------------------------------------------------ handlers

    def batch_retrieve(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        rec = self.batch(batch_id)
        self.core.advance(rec)
        return json_resp(self.batch_json(rec, ctx, batch_id))

    def batch_list(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        with self.core.lock:
            # (shown id, batch), newest first: a batch with an alias (Anthropic's alias_batch
            # fault) is listed twice, the alias first.
            entries = sorted(((k, b) for k, b in self.core.batches.items() if self.holds(b)),
                             key=lambda e: (e[1].seq, e[0] != e[1].id), reverse=True)
        window, wrap = self.batch_page(ctx, [k for k, _ in entries])
        data = []
        for shown_id, rec in entries[window]:
            self.core.advance(rec)
            data.append(self.batch_json(rec, ctx, shown_id))
        return json_resp(wrap(data))

    def batch_cancel(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        rec = self.batch(batch_id)
        with rec.lock:  # a cancel is not a look (see Core.request_cancel)
            if rec.state == "done":
                error = self.cancel_ended(rec, batch_id)
                if error is not None:
                    raise error
            else:
                self.cancel(rec)
            return json_resp(self.cancel_answer(rec, ctx, batch_id))

    def batch_delete(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        self.deletable(self.batch(batch_id), batch_id)
        with self.core.lock:
            self.core.batches.pop(batch_id, None)
        return json_resp(self.deleted_answer(batch_id))

    # ------------------------------------------------------------------ processing

    def outcomes(self, rec: BatchRec, limit: int, end: End) -> Iterator[tuple[BatchLine, Outcome]]:
        """Each request of a batch that ends ``end`` with its outcome, in file order: the first
        ``limit`` answered (those answered while it ran, by ``progress``, kept as they were), the
        rest as ``unprocessed`` says."""
        for i, line in enumerate(self.batch_lines(rec)):
            if i < limit:
                outcome = rec.answered[i] if i < len(rec.answered) else self.answer_line(rec, line)
            else:
                left = self.unprocessed(end)
                if left is None:
                    return
                outcome = left
            yield line, outcome

    def progress(self, rec: BatchRec, fraction: float) -> None:
        """A provider with ``running_counts`` answers the first ``fraction`` of a running batch's
        requests now, so the counts it reports are true (never more than an expire/cancel fault
        lets finish)."""
        if not self.running_counts:
            return
        limit = rec.n
        for part in (rec.expire_fraction, rec.cancel_fraction):
            if part is not None:
                limit = math.floor(part * rec.n)
        target = min(limit, math.floor(fraction * rec.n))
        if target <= len(rec.answered):
            return
        for i, line in enumerate(self.batch_lines(rec)):
            if i >= target:
                break
            if i >= len(rec.answered):
                rec.answered.append(self.answer_line(rec, line))

    # ------------------------------------------------------------------ online

    def answer_online(self, ctx: Ctx, model: str, endpoint: str, answer: Callable[[Any], Outcome]) -> Outcome:
        """One online call: logged as accepted (its custom_id from the trace header), answered by
        ``answer(custom_id)``; a refusal is raised as the provider's HTTP error."""
        custom_id = ctx.headers.get(TRACE_HEADER)
        self.core.log_request(self.name, model, custom_id, "online", endpoint)
        outcome = answer(custom_id)
        if not outcome.ok:
            raise refused(outcome)
        return outcome
