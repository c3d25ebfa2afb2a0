"""Judge verdicts: read `total` robustly, never invent a zero.

Judges answer `{"points_awarded":[...],"total":N}`, but real judges wrap it in a fenced code
block, put text around it, or write numbers as strings. All of those parse. A reply with no
parseable total is an infrastructure failure (the caller re-queues it), never a score of 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from . import jsonl

_DECODER = json.JSONDecoder()
# `total` as a whole word: "max_total": 50 or "subtotal": 5 is not the verdict's total.
_TOTAL_RE = re.compile(r'(?<![\w])"?total"?\s*[:=]\s*"?\s*(-?\d+(?:\.\d+)?)')


@dataclass(frozen=True)
class Verdict:
    total: float | None
    points_awarded: list[Any] | None = None
    error: str | None = None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%"))
        except ValueError:
            return None
    return None


def _objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object that can be decoded starting at some '{' in the text."""
    found = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = text.find("{", end)
    return found


def parse_verdict(text: str | None) -> Verdict:
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
    matches = list(_TOTAL_RE.finditer(text))
    if matches:  # malformed JSON, but a `total` is written out: the last one wins
        return Verdict(float(matches[-1].group(1)), error=None)
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
