"""The protocol's per-model tables, built in (spec 001 §2-3).

Caps are in characters (Python `len` of the decoded text), keyed by model name. A route may
override its caps in the config; an unlisted model gets the default row and a warning, because
the spec says a new model's real window must be probed, never inherited from an older version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: (en cap, cjk cap) per model, characters — spec 001 §3 table.
PAPER_CAPS: dict[str, tuple[int, int]] = {
    **{
        m: (2_850_000, 850_000)
        for m in (
            "gpt-4.1", "gpt-5.4", "gpt-5.5", "qwen3.5-plus", "qwen3.6-plus", "qwen3.7-max",
            "qwen3.7-plus", "gemini-2.5-pro", "gemini-3.1", "deepseek-v4", "glm-5.2",
            "claude-opus-4.6", "claude-opus-4.8",
        )
    },
    "deepseek-v3.2": (1_200_000, 400_000),
    "gpt-5.1": (1_050_000, 320_000),
    "kimi-k2.6": (1_000_000, 320_000),
    "doubao-seed-2.1": (1_000_000, 320_000),
    "qwen3-max": (690_000, 210_000),
    "minimax-m2.7": (570_000, 220_000),
}

DEFAULT_CAPS: tuple[int, int] = (2_850_000, 850_000)

#: Models the spec (§2) says reject temperature: it is omitted for them, not sent as null.
REJECTS_TEMPERATURE: frozenset[str] = frozenset({"claude-opus-4.6", "claude-opus-4.8", "gpt-5.4"})

CJK_WINDOW = 4000
CJK_THRESHOLD = 20


@dataclass(frozen=True)
class Caps:
    en: int
    cjk: int
    source: str  # "paper table", "config", or "default (unlisted model)"


def _normalise(model: str) -> str:
    # Routes often carry a provider prefix ("mr.claude-...", "models/gemini-...").
    return model.rsplit("/", 1)[-1].lower()


def builtin_caps(model: str) -> Caps | None:
    row = PAPER_CAPS.get(_normalise(model))
    return Caps(row[0], row[1], "paper table") if row else None


def rejects_temperature(model: str) -> bool:
    return _normalise(model) in REJECTS_TEMPERATURE


_IDEOGRAPH = re.compile("[\u4e00-\u9fff]")


def is_cjk(text: str) -> bool:
    """The spec's CJK rule: more than 20 ideographs U+4E00-U+9FFF among the first 4,000 chars."""
    head = text[:CJK_WINDOW]
    if head.isascii():  # O(1) for str: English needs no scan (a Python loop here cost ~0.1 ms a call)
        return False
    for count, _ in enumerate(_IDEOGRAPH.finditer(head), start=1):
        if count > CJK_THRESHOLD:
            return True
    return False
