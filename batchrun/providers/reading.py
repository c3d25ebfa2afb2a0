"""Reading what a provider sends back, which may not have the documented shape.

A batch object, a listing and a result line are provider output: a broken or hostile provider
can send any JSON value. The adapters read them through these helpers, so that no answer makes
batchrun raise where it should not: a batch object or listing without what the protocol
requires is a `MalformedResponse` (the call is retried, then the batch waits for a later round),
and a result line of the wrong shape is a per-request infrastructure failure of the request it
names (`malformed`, retried, never a zero), whatever JSON value it is (`parse_total`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import BatchStatus, LineResult, MalformedResponse


@contextmanager
def removed_if_cut(target: Path) -> Iterator[None]:
    """A result file streamed to `target`, removed if the transfer fails part-way. poll redacts a
    download once it is whole (redaction.redact_file): the part of a file a dropped connection or
    the run's time limit cut short may hold a key the provider quoted back, and nothing reads it
    (the next poll fetches the file again)."""
    try:
        yield
    except BaseException:
        target.unlink(missing_ok=True)
        raise


# -- reading batch objects that may not have the documented shape ----------------------------
#
# A batch's status and a listing's entries are provider output too. The id is what every later
# call names, so a batch object without a non-empty string id is a malformed answer
# (MalformedResponse: the call is retried, then the batch waits for a later round; so is
# a listing with such an entry: listed_batches). Any other field of the wrong type reads as
# absent: an unknown state stays "running", unknown counts give no progress, never a traceback.


def batch_object(obj: Any, id_field: str) -> tuple[dict[str, Any], str]:
    """A provider's batch object (an SDK model or a dict) as plain JSON values, and its id."""
    # warnings=False: the SDKs build models from the answer without validating it, so a field of
    # the wrong type is kept as sent and pydantic would warn while dumping it.
    raw = obj.model_dump(mode="json", warnings=False) if hasattr(obj, "model_dump") else obj
    if not isinstance(raw, dict):
        raise MalformedResponse(f"a batch was answered as a JSON {json_type(raw)}, not an object")
    batch_id = raw.get(id_field)
    if not isinstance(batch_id, str) or not batch_id.strip():
        raise MalformedResponse(f"a batch was answered without its id ({id_field} is a JSON {json_type(batch_id)})")
    return raw, batch_id


# More batches than a listing read for adoption ever holds: those created since the uncertain
# create (OpenAI and Anthropic list newest first and stop there; Gemini bounds its scan at 2,000).
MAX_LISTED = 10_000


def listed_batches(entries: Iterable[Any], read: Callable[[Any], BatchStatus]) -> Iterator[BatchStatus]:
    """A listing's entries read as batches (`read`: the adapter's).

    A listing is read to find out whether an uncertain create made a batch (submit's adoption),
    so an entry batchrun cannot fully read is not skipped: one without an id, or whose tag or
    request count (what adoption tells a batch by) it cannot read, could be that batch, and
    reading it as absent would create it a second time, paid twice. Such a listing is a malformed answer
    (MalformedResponse: retried, then the batch waits for a later round). So is one that names a
    batch twice or goes on past MAX_LISTED entries: a hostile listing answering `has_more: true`
    with the same page for ever kept submit paging without end (and concluding "not created"
    instead would pay twice)."""
    seen: set[str] = set()
    for n, entry in enumerate(entries):
        if n >= MAX_LISTED:
            raise MalformedResponse(f"the listing went on past {MAX_LISTED:,} batches")
        status = read(entry)  # MalformedResponse without an id
        if status.provider_batch_id in seen:
            raise MalformedResponse(f"the listing names batch {status.provider_batch_id} twice (a page served again?)")
        seen.add(status.provider_batch_id)
        if status.unreadable:
            raise MalformedResponse(f"a listed batch ({status.provider_batch_id}) has {', '.join(status.unreadable)} of the wrong type")
        yield status


def answered_for(status: BatchStatus, asked: str) -> BatchStatus:
    """The status of the batch asked for; a status of another batch is a malformed answer (its
    results downloaded for this one would leave this one's requests missing, sent again)."""
    if status.provider_batch_id != asked:
        raise MalformedResponse(f"asked for batch {asked}, the answer is about batch {status.provider_batch_id}")
    return status


def wrong_types(raw: dict[str, Any], **expected: type | tuple[type, ...]) -> tuple[str, ...]:
    """The fields of `raw` present (not null) but not of the expected type."""
    return tuple(k for k, t in expected.items() if raw.get(k) is not None and not isinstance(raw.get(k), t))


def object_field(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def text_field(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) else None


def number_field(raw: dict[str, Any], key: str) -> float | None:
    """A finite number (a timestamp), or None: 10**400 or NaN reads as absent, never an OverflowError."""
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 2**63 else None
    return value if math.isfinite(value) else None


# -- reading result lines that may not have the documented shape ------------------------------
#
# A result line is provider output: a broken or hostile provider can send any JSON value
# (`[1,2,3]`, `null`, a `result` that is a string). Such a line is a per-request infrastructure
# failure ("transient", error_type "malformed": retried, never a zero) of the custom_id it names,
# if it names one; it must never raise and stop the other lines of the batch. The adapters read
# fields through these helpers, which raise `Malformed` on a wrong type; `parse_total` turns that
# into the LineResult.

# Longest provider label (finish reason, error type) and error message kept per line: real ones
# are a few words or sentences; a provider sending megabytes there must not fill state.db.
MAX_LABEL_CHARS = 200
MAX_MESSAGE_CHARS = 16_384


class Malformed(ValueError):
    """A result line (or a field of it) without the shape the provider documents."""


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def as_object(value: Any, what: str) -> dict[str, Any]:
    """An object field; absent/null reads as {} (the adapters treat missing parts as before)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} is a JSON {json_type(value)}, not an object")
    return value


def as_array(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{what} is a JSON {json_type(value)}, not an array")
    return value


def as_text(value: Any, what: str) -> str | None:
    """Answer text: a string or absent; anything else is malformed (never silently empty)."""
    if value is None or isinstance(value, str):
        return value
    raise Malformed(f"{what} is a JSON {json_type(value)}, not a string")


def as_count(value: Any) -> int | None:
    """A token count, or None (unknown) when it is not a non-negative integer SQLite can hold:
    a bad usage figure makes the cost unknown, it does not discard the answer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value < 2**63:
        return value
    return None


def as_label(value: Any) -> str | None:
    """A finish reason, error type or code, as short text (numbers kept: Gemini codes are ints)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value[:MAX_LABEL_CHARS]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)[:MAX_LABEL_CHARS]
    return _compact(value)[:MAX_LABEL_CHARS]


def as_message(value: Any) -> str | None:
    """A provider's error message, as text of bounded length."""
    if value is None:
        return None
    text = value if isinstance(value, str) else _compact(value)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [cut]"


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def malformed(custom_id: str | None, why: str) -> LineResult:
    """A line that names a request but cannot be read: an infrastructure failure of that request
    (retried). With no readable custom_id the LineResult names no request and collect skips it."""
    return LineResult(custom_id or "", "transient", error_type="malformed", error_message=as_message(why))


def parse_total(custom_id_of: Callable[[Any], str | None], parse: Callable[[str, dict[str, Any]], LineResult], obj: Any) -> LineResult:
    """Run an adapter's parser on one decoded line so that no JSON value makes it raise.

    `Malformed` is the expected way out; the other exception types are what a field of an
    unexpected type can still raise in a parser (a missed check is then a malformed line, not a
    crash of the collect)."""
    custom_id = custom_id_of(obj)
    if not isinstance(obj, dict):
        return malformed(custom_id, f"result line is a JSON {json_type(obj)}, not an object")
    try:
        return parse(custom_id or "", obj)
    except Malformed as e:
        return malformed(custom_id, str(e))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as e:
        return malformed(custom_id, f"unexpected result line shape ({type(e).__name__}: {e})")


def custom_id_field(obj: Any, *names: str) -> str | None:
    """The first of `names` that holds a string in a line object; None if the line names none.
    Our custom_ids are strings: a number or an object there is not one of ours."""
    if not isinstance(obj, dict):
        return None
    for name in names:
        value = obj.get(name)
        if isinstance(value, str) and value:
            return value
    return None


# -- a batch's validation errors, grouped -----------------------------------------------------
#
# A batch that fails validation lists one error per bad input line (OpenAI's `errors.data`, each
# with its `line`; DashScope's and Moonshot's compatible modes the same). A route whose model the
# Batch API does not take fails every line with the same words: 481 copies of one message would
# make refresh's `ended: failed:` line, `status` and the report one 40 KB line. The message says
# each distinct error once, with the lines it was on as ranges; the full list stays in state.db
# (batches.last_seen_json keeps the provider's batch object as seen).

MAX_DISTINCT_ERRORS = 5  # distinct errors named in a batch's message; the rest are counted
MAX_LINE_RANGES = 8  # line ranges named per error; the rest are counted


def batch_errors_message(errors: Iterable[dict[str, Any]]) -> str | None:
    """`code: message (lines 1–30)` for each distinct error of a failed batch, in order of first
    appearance, `; `-separated; None without errors."""
    lines_of: dict[str, tuple[list[int], list[str]]] = {}
    for e in errors:
        text = f"{as_label(e.get('code'))}: {as_message(e.get('message'))}"
        numbers, others = lines_of.setdefault(text, ([], []))
        line = e.get("line")
        if isinstance(line, int) and not isinstance(line, bool):
            numbers.append(line)
        elif line not in (None, "", 0, False):
            others.append(as_label(line) or "")
    if not lines_of:
        return None
    parts = [text + _where(numbers, others) for text, (numbers, others) in list(lines_of.items())[:MAX_DISTINCT_ERRORS]]
    more = len(lines_of) - MAX_DISTINCT_ERRORS
    return "; ".join(parts) + (f"; and {more} more distinct error(s)" if more > 0 else "")


def _where(numbers: list[int], others: list[str]) -> str:
    """` (line 3)`, ` (lines 1–30, 32)`: the lines an error was on, as ranges."""
    ranges: list[str] = []
    for n in sorted(set(numbers)):
        if ranges and ranges[-1].rpartition("–")[2] == str(n - 1):
            ranges[-1] = f"{ranges[-1].partition('–')[0]}–{n}"
        else:
            ranges.append(str(n))
    ranges += others
    if not ranges:
        return ""
    count = len(set(numbers)) + len(others)
    shown = ", ".join(ranges[:MAX_LINE_RANGES]) + (f" and {len(ranges) - MAX_LINE_RANGES} more range(s)" if len(ranges) > MAX_LINE_RANGES else "")
    return f" (line {shown})" if count == 1 else f" ({count} lines: {shown})" if len(ranges) > MAX_LINE_RANGES else f" (lines {shown})"
