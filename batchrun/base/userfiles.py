"""Reading the files a user hands batchrun (config, dataset, corpus documents) defensively.

Three things Python's own readers let through, each of which ends an overnight run badly:

- a path that is not a regular file: opening a FIFO for reading blocks until a writer appears
  (forever, in cron), a device never ends. Files are opened non-blocking and checked with fstat,
  so the check and the open are the same file.
- JSON's `NaN`, `Infinity` and `-Infinity` (and `1e999`, which overflows to infinity): not JSON
  (RFC 8259), but Python's json module accepts them. A NaN rubric sum cannot be stored, an
  infinite one makes every score 0. `non_json_value` finds them, with the field's path.
- nesting: the json module recurses, so a few thousand `[` raise RecursionError; and a tree a
  little under that limit can still exhaust the stack later, in any code that walks it.
  `parse_json` turns the first into a ValueError and `non_json_value` bounds the depth.
- an integer of more than 4,300 digits (`sys.get_int_max_str_digits()`): json and tomllib raise
  a bare ValueError with no position. `number_too_long` makes it a `NumberTooLong`, a
  JSONDecodeError with the line and column of the number, so every reader that reports a JSON
  syntax error with its position reports this one too.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

# Far above any real record (a WildTrace record nests 4 levels: record, ground_truth,
# scoring_rubric, item) and far below the interpreter's recursion limit.
MAX_DEPTH = 64


class NotRegularFile(OSError):
    """The path exists but is a folder, FIFO, socket or device."""


def file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading; NotRegularFile (an OSError) for anything else.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer; it changes
    nothing for a regular file, whose reads never block."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path) -> bytes:
    with open_regular(path) as f:
        return f.read()


class TooDeep(ValueError):
    """JSON nested deeper than the parser can follow."""


class NumberTooLong(json.JSONDecodeError):
    """An integer with more digits than Python converts to an int (its int-string limit)."""


def number_too_long(text: str, exc: BaseException) -> NumberTooLong | None:
    """`exc`, raised while parsing `text` (JSON or TOML), as a NumberTooLong at the number's
    position, or None if it is not Python's int-string limit."""
    limit = sys.get_int_max_str_digits()
    if not isinstance(exc, ValueError) or "integer string conversion" not in str(exc) or not limit:
        return None
    # The first run of more than `limit` digits (TOML allows underscores between them); the
    # lookbehind starts each attempt at the beginning of a run, so the search stays linear.
    found = re.search(rf"(?<![0-9_])[0-9](?:_?[0-9]){{{limit},}}", text)
    digits = found.group().replace("_", "") if found else ""
    what = f"an integer of {len(digits):,} digits ({digits[:12]}...)" if found else "an integer"
    return NumberTooLong(f"{what}, more than the {limit:,} digits Python reads; no value batchrun reads needs that many",
                         text, found.start() if found else 0)


def parse_json(text: str, **kwargs: Any) -> Any:
    """json.loads, with excessive nesting a ValueError (TooDeep) rather than a RecursionError,
    and an integer past Python's int-string limit a NumberTooLong with its position."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise TooDeep("nested too deeply to parse (thousands of levels)") from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:
        if (too_long := number_too_long(text, e)) is not None:
            raise too_long from None
        raise


class BadValue(NamedTuple):
    field: str  # "ground_truth.scoring_rubric[0].points"
    problem: str  # "is NaN"
    too_deep: bool
    too_large: bool = False
    hint: str | None = None  # the fix, where the caller's usual one does not apply


# JSON lets a string spell half of a UTF-16 pair ("\ud800"); json.loads gives Python a lone
# surrogate, which no UTF-8 writer accepts (hashing the record, state.db, the request file).
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_FIX = ("A JSON \\uD800-\\uDFFF escape must be half of a pair (a high one, then a low one): fix or remove the "
                  "escape there.")


# SQLite's INTEGER: a larger integer cannot be stored, and converting it to a float overflows
# (past ~309 digits) or loses its value.
MAX_INT = 2**63 - 1


def non_json_value(value: Any) -> BadValue | None:
    """The first value (depth-first) that JSON cannot express, that nests too deep, or an integer
    too large to store, or None.

    Walks iteratively, so a deep tree cannot overflow the stack here."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        where, v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return BadValue(where, f"nests more than {MAX_DEPTH} levels deep", True)
        if isinstance(v, float) and not math.isfinite(v):
            return BadValue(where, f"is {'NaN' if math.isnan(v) else ('Infinity' if v > 0 else '-Infinity')}", False)
        if isinstance(v, str) and (lone := _SURROGATE.search(v)):
            return BadValue(where, f"holds \\u{ord(lone.group()):04x}, half of a UTF-16 surrogate pair without its other half",
                            False, hint=_SURROGATE_FIX)
        if isinstance(v, int) and not -MAX_INT - 1 <= v <= MAX_INT:
            return BadValue(where, f"is an integer of {len(str(abs(v))):,} digits, beyond the {MAX_INT:,} a database column holds",
                            False, True)
        if isinstance(v, dict):
            items = [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
            if (lone_key := next((k for k in v if isinstance(k, str) and _SURROGATE.search(k)), None)) is not None:
                return BadValue(f"{where}.{lone_key!r}" if where else repr(lone_key), "is a key name holding half of a UTF-16 "
                                "surrogate pair without its other half", False, hint=_SURROGATE_FIX)
        elif isinstance(v, list):
            items = [(f"{where}[{i}]", x) for i, x in enumerate(v)]
        else:
            continue
        stack.extend((w, x, depth + 1) for w, x in reversed(items))
    return None


def reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """object_pairs_hook: a JSON object naming a key twice (json keeps the last, silently)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


class DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(f"key {key!r} appears twice in one object")
        self.key = key


def printable_line(text: str) -> bool:
    """A name that can be shown in a terminal, a log line and a Markdown table cell: no control
    characters (NUL, newline, tab, escape), no Unicode line or paragraph separators."""
    return text.isprintable()
