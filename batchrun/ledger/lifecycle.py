"""The lifecycle of a local batch: its states, their groups, and the one way to move between them.

A local batch is one request file under jobs/<id>/ and what became of it at the provider
(`batches.status`). Each move is committed to state.db before the provider call that depends on
it (see submit), so a crash anywhere leaves a state the next run can finish. The main line:

    writing -> planned -> uploading -> uploaded -> creating -> in_flight -> ended -> downloaded -> collected

(a sync-transport batch: planned -> in_flight -> downloaded), and the side roads:

- `writing`: the request file is being written; a crash leaves it, the next plan marks it
  `abandoned` (its requests were never live).
- `planned`/`uploading`/`uploaded` → `superseded`: the inputs stopped wanting its requests
  before a provider batch was created from it.
- `uploading`/`creating` are intents: a crash in them is resolved by uploading again / by
  adoption (a create may or may not have reached the provider).
- A batch the provider refused as a whole before creating it (a key refused on the upload or the
  create; a validation failure on an inline create) goes straight to `downloaded` with no result
  file: collect records why for each of its requests.
- `refused`: collected with no result rows because the provider's queue was full ("not now"):
  its requests are simply pending again.
- `withdrawn`: cancelled by the user before it was created (or a sync batch, whose lines poll
  sends itself); its unanswered requests are planned again.
- `downloaded` → `ended`, the one move back: a result file deleted (or changed) before collect
  read it is downloaded again by the next poll, not sent and paid for again (the providers keep
  the results for weeks: see `send_back_lost_result_files` in resume.py). `batches.redownload` says
  'pending' until it is; 'gone' if the provider no longer held them (then, as before, its
  requests have no result and are sent again).

`TRANSITIONS` lists every move; `move` refuses any other, so a bug (or a second writer, which the
lock prevents) cannot silently put a batch where no step expects it. The views in the
migrations (migrations/) spell these states as literals, frozen with the migration that created them; new code
uses the names here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from ..base.redaction import redact
from .store import Store, sql_list


class Status(StrEnum):
    """`batches.status`. A StrEnum: it is the text stored, compared and bound as a parameter."""

    WRITING = "writing"
    PLANNED = "planned"
    UPLOADING = "uploading"
    UPLOADED = "uploaded"
    CREATING = "creating"
    IN_FLIGHT = "in_flight"
    ENDED = "ended"
    DOWNLOADED = "downloaded"
    COLLECTED = "collected"
    # Final without having run (or without rows): see the module docstring.
    ABANDONED = "abandoned"
    SUPERSEDED = "superseded"
    REFUSED = "refused"
    WITHDRAWN = "withdrawn"


TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.WRITING: frozenset({Status.PLANNED, Status.ABANDONED}),
    # in_flight directly: a sync batch (no provider batch); downloaded directly: refused as a whole.
    Status.PLANNED: frozenset({Status.UPLOADING, Status.IN_FLIGHT, Status.SUPERSEDED, Status.WITHDRAWN, Status.DOWNLOADED}),
    # uploading again: resumed after a crash; planned: the upload failed in this process.
    # superseded (here and from uploaded): the inputs changed before a batch was created.
    Status.UPLOADING: frozenset({Status.UPLOADING, Status.UPLOADED, Status.PLANNED, Status.WITHDRAWN, Status.SUPERSEDED}),
    # uploading again: an inline-request batch has no file id, so its "upload" is redone.
    Status.UPLOADED: frozenset({Status.UPLOADING, Status.CREATING, Status.WITHDRAWN, Status.DOWNLOADED, Status.SUPERSEDED}),
    # creating again: the next attempt after an uncertain one; uploaded: certainly not created.
    Status.CREATING: frozenset({Status.CREATING, Status.UPLOADED, Status.IN_FLIGHT, Status.DOWNLOADED}),
    # downloaded directly and withdrawn: the sync transport.
    Status.IN_FLIGHT: frozenset({Status.ENDED, Status.DOWNLOADED, Status.WITHDRAWN}),
    Status.ENDED: frozenset({Status.DOWNLOADED}),
    # withdrawn: `cancel` withdraws a sync batch whatever its status (live ones only). ended: its
    # result file went missing (or changed) before collect read it: downloaded again (m024).
    Status.DOWNLOADED: frozenset({Status.COLLECTED, Status.REFUSED, Status.WITHDRAWN, Status.ENDED}),
    Status.COLLECTED: frozenset(),
    Status.ABANDONED: frozenset(),
    Status.SUPERSEDED: frozenset(),
    Status.REFUSED: frozenset(),
    Status.WITHDRAWN: frozenset(),
}

# -- groups ----------------------------------------------------------------------------------

# A request in a batch in one of these is live (in flight, or about to be), so it is not planned
# again. `writing` is deliberately absent: a crash while writing leaves its requests pending.
LIVE: tuple[Status, ...] = (Status.PLANNED, Status.UPLOADING, Status.UPLOADED, Status.CREATING, Status.IN_FLIGHT, Status.ENDED, Status.DOWNLOADED)
# Not created at the provider yet: submit uploads and creates these; cancel withdraws them locally.
NOT_CREATED: tuple[Status, ...] = (Status.PLANNED, Status.UPLOADING, Status.UPLOADED)
# Created (or a sync batch started) and not finished: poll follows these.
TO_FOLLOW: tuple[Status, ...] = (Status.IN_FLIGHT, Status.ENDED)
# In a provider's queue (or maybe, while creating): what its queue limits count.
QUEUED: tuple[Status, ...] = (Status.CREATING, Status.IN_FLIGHT)
# Sent (or maybe sent) and not collected yet: their estimates are tonight's committed spend.
SPENDING: tuple[Status, ...] = (Status.CREATING, Status.IN_FLIGHT, Status.ENDED, Status.DOWNLOADED)
# Created at the provider, whatever came of it since: a route whose generation has started.
STARTED: tuple[Status, ...] = (Status.IN_FLIGHT, Status.ENDED, Status.DOWNLOADED, Status.COLLECTED)

# `batches.provider_state` of a batch whose upload or create the provider refused for the key
# (401/403): batchrun's own mark (no provider reports it as a batch state); collect records each
# of its requests as an 'auth' result, which blocks the route with "check the key in VAR".
KEY_REFUSED = "key_refused"
# `batches.provider_state` of a batch whose upload or create was redirected (or sent) to another host
# than the route's, which batchrun refused (netguard.ForeignHost): batchrun's own mark; collect
# records each of its requests as an 'invalid' result, which blocks the route with the diagnosis.
HOST_REFUSED = "host_refused"
# `batches.provider_state` of an in-flight batch the user cancelled (`cancel`): batchrun's own mark
# until the next poll sees the provider end it (and records the provider's final state instead).
CANCEL_REQUESTED = "cancel_requested"
# `batches.redownload` (m024): sent back from `downloaded` to `ended` because its result file went
# missing or changed before collect read it (the next poll downloads it again); and the provider
# answered that it no longer holds the results (collect reads what is on disk, as before).
REDOWNLOAD_PENDING = "pending"
REDOWNLOAD_GONE = "gone"


class TransitionError(RuntimeError):
    """A move TRANSITIONS does not allow: a bug, never the user's doing."""


# Columns batchrun writes from its own values (paths under jobs/, their checksums, the host the
# config names), never a provider's words: not redacted, so a short key (redaction.SHORT_KEY_CHARS)
# that happens to be a folder name cannot corrupt the paths collect reads.
_OWN_VALUES = frozenset({"result_files_json", "result_files_sha256_json", "endpoint_host"})


def _values(store: Store, fields: dict[str, Any]) -> list[Any]:
    # The database file must still be the one this run opened before anything more is recorded
    # (store.check_same_file: a state.db deleted or replaced mid-run stops the run here).
    store.check_same_file()
    # Errors and statuses are the provider's words, which may quote the key back.
    return [redact(v) if isinstance(v, str) and k not in _OWN_VALUES else v for k, v in fields.items()]


def record(store: Store, batch_id: str, **fields: Any) -> None:
    """Record what was learnt about a batch (provider status, error, file ids...), not a move."""
    if "status" in fields:
        raise TransitionError("record() does not move a batch: use move()")
    cols = ", ".join(f"{k} = ?" for k in fields)
    with store.db.atomic():
        store.db.execute(f"UPDATE batches SET {cols} WHERE id = ?", [*_values(store, fields), batch_id])


def move(store: Store, batch_id: str, to: Status, **fields: Any) -> None:
    """Move one batch to `to`, recording `fields` in the same statement.

    Refused with TransitionError (and nothing written) unless TRANSITIONS allows the move from
    the batch's current status."""
    sources = tuple(s for s, targets in TRANSITIONS.items() if to in targets)
    cols = ", ".join(["status = ?", *(f"{k} = ?" for k in fields)])
    with store.db.atomic():
        cur = store.db.execute(f"UPDATE batches SET {cols} WHERE id = ? AND status IN {sql_list(sources)}",
                               [to, *_values(store, fields), batch_id])
        if cur.rowcount != 1:
            current = store.scalar("SELECT status FROM batches WHERE id = ?", [batch_id])
            raise TransitionError(f"batch {batch_id}: {current or 'no such batch'} -> {to} is not a move of the batch lifecycle")


def move_all(store: Store, frm: Status, to: Status, where: str = "1", params: Any = (), **fields: Any) -> int:
    """Move every batch in `frm` matching the SQL condition `where` to `to`; how many moved.

    For use inside the caller's transaction or on its own."""
    if to not in TRANSITIONS[frm]:
        raise TransitionError(f"{frm} -> {to} is not a move of the batch lifecycle")
    cols = ", ".join(["status = ?", *(f"{k} = ?" for k in fields)])
    with store.db.atomic():
        cur = store.db.execute(f"UPDATE batches SET {cols} WHERE status = ? AND ({where})", [to, *_values(store, fields), frm, *params])
    return cur.rowcount


def new_batch(store: Store, **fields: Any) -> None:
    """Insert a new batch row, `writing` (its request file is about to be written)."""
    store.check_same_file()
    cols = ", ".join(["status", *fields])
    marks = ", ".join("?" for _ in range(len(fields) + 1))
    store.db.execute(f"INSERT INTO batches ({cols}) VALUES ({marks})", [Status.WRITING, *fields.values()])
