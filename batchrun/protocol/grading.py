"""Judge verdicts: read `total` robustly, never invent a zero.

Judges answer `{"points_awarded":[...],"total":N}`, but real judges wrap it in a fenced code
block, put text around it, or write numbers as strings. All of those parse. A reply with no
parseable total is an infrastructure failure (the caller re-queues it), never a score of 0.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..base import jsonl

_DECODER = json.JSONDecoder()
# `total` as a whole word: "max_total": 50 or "subtotal": 5 is not the verdict's total.
# The number must end there: "9e1" or "12.5.3" is not a total of 9 or 12.5.
_TOTAL_RE = re.compile(r'(?<![\w])"?total"?\s*[:=]\s*"?\s*(-?\d+(?:\.\d+)?)(?!\d|\.\d|[eE][-+]?\d)')


@dataclass(frozen=True)
class Verdict:
    total: float | None
    points_awarded: list[Any] | None = None
    error: str | None = None


def _number(value: Any) -> float | None:
    """A finite number, or None. NaN (which JSON decoding accepts) would be stored as NULL and
    drop the judge from the cell's mean; Infinity would clamp to full marks; an integer past a
    float's range raises OverflowError: none of them is a verdict."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            number = float(value.strip().rstrip("%"))
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


# A JSON object starts "{", whitespace, then '"' or '}' (RFC 8259 section 4): only such a '{' can
# start one, so only such a '{' is decoded. Each failed decode costs time in proportion to its
# position (json's error counts the lines before it), so trying every '{' of a reply made of a
# million of them took 200 s of collect's CPU, past any run's time limit.
_OBJECT_START = re.compile(r'\{[ \t\n\r]*["}]')
# And at most this many are tried: a reply holding more object starts than any verdict needs
# ('{"a":' repeated, each start decoded a thousand levels deep) is not read past them (its
# judgment is then unparseable: an infrastructure failure, judged again, never a zero).
MAX_OBJECT_STARTS = 1000


def _objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object that can be decoded starting at some '{' in the text (of the first
    MAX_OBJECT_STARTS places one could start)."""
    found = []
    start = _OBJECT_START.search(text)
    for _ in range(MAX_OBJECT_STARTS):
        if start is None:
            break
        i = start.start()
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's limit
            start = _OBJECT_START.search(text, i + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
        start = _OBJECT_START.search(text, end)
    return found


def parse_verdict(text: str | None, *, complete: bool = True) -> Verdict:
    """The verdict in a judge's reply. `complete=False`: the reply stopped at the judge's output
    budget, so only a whole JSON verdict counts, never a `total` read from the text (a cut
    `"total":1` may have been `"total":100`)."""
    if not text or not text.strip():
        return Verdict(None, error="empty reply")
    stripped = text.strip()
    if stripped.startswith("{"):  # the common case: the reply is exactly the verdict object
        try:
            obj = jsonl.loads(stripped)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "total" in obj and _number(obj["total"]) is not None:
            points = obj.get("points_awarded")
            return Verdict(_number(obj["total"]), points if isinstance(points, list) else None)
    # Fenced blocks first (```json ... ```), then the whole text.
    candidates = re.findall(r"```(?:json|JSON)?\s*(.*?)```", text, flags=re.S) + [text]
    for chunk in candidates:
        for obj in reversed(_objects(chunk)):  # the last verdict in the reply wins
            if "total" in obj:
                total = _number(obj["total"])
                if total is not None:
                    points = obj.get("points_awarded")
                    return Verdict(total, points if isinstance(points, list) else None)
    matches = list(_TOTAL_RE.finditer(text)) if complete else []
    if matches and (total := _number(matches[-1].group(1))) is not None:
        return Verdict(total, error=None)  # malformed JSON, but a `total` is written out: the last one wins
    return Verdict(None, error="no parseable total in the judge's reply")


def points_json(points: list[Any] | None) -> str | None:
    """`points_awarded` as JSON text for state.db. A list of ints (nearly every verdict) is its
    own repr, ~4x faster than json.dumps at 80,000 verdicts a collect."""
    if points is None:
        return None
    if all(type(p) is int for p in points):
        return repr(points)
    return json.dumps(points)


def score(total: float, rubric_total: float) -> float:
    """clamp(total / sum of the rubric's points, 0, 1), as the protocol scores a verdict."""
    if rubric_total <= 0:
        return 0.0
    return min(max(total / rubric_total, 0.0), 1.0)
