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
"""

from __future__ import annotations

import json
import math
import os
import stat
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


def parse_json(text: str, **kwargs: Any) -> Any:
    """json.loads, with excessive nesting a ValueError (TooDeep) rather than a RecursionError."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise TooDeep("nested too deeply to parse (thousands of levels)") from None


class BadValue(NamedTuple):
    field: str  # "ground_truth.scoring_rubric[0].points"
    problem: str  # "is NaN"
    too_deep: bool


def non_json_value(value: Any) -> BadValue | None:
    """The first value (depth-first) that JSON cannot express or that nests too deep, or None.

    Walks iteratively, so a deep tree cannot overflow the stack here."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        where, v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return BadValue(where, f"nests more than {MAX_DEPTH} levels deep", True)
        if isinstance(v, float) and not math.isfinite(v):
            return BadValue(where, f"is {'NaN' if math.isnan(v) else ('Infinity' if v > 0 else '-Infinity')}", False)
        if isinstance(v, dict):
            items = [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
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
