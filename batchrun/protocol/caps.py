"""The WildTrace protocol's per-model tables, built in (its caps table and temperature list).

Caps are in characters (Python `len` of the decoded text), keyed by model name and matched on
`normalise_model` (however a provider or router spells the id). A route may override its caps in
the config; an unlisted model gets the default row and a warning (once), because the protocol says a
new model's real window must be probed, never inherited from an older version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: (en cap, cjk cap) per model, characters — the protocol's caps table (the paper's).
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

#: Models the protocol says reject temperature: it is omitted for them, not sent as null.
REJECTS_TEMPERATURE: frozenset[str] = frozenset({"claude-opus-4.6", "claude-opus-4.8", "gpt-5.4"})

CJK_WINDOW = 4000
CJK_THRESHOLD = 20


@dataclass(frozen=True)
class Caps:
    en: int
    cjk: int
    source: str  # "paper table", "config", or "default (unlisted model)"


# --- one spelling per model -------------------------------------------------------------------
#
# Every built-in rule (the caps table, the temperature list, "is this contestant the judge's
# model") compares `normalise_model` forms, exactly: never a prefix or family match, because
# mapping one model version onto another is the mistake the protocol warns about (Qwen3.7 given
# Qwen3-Max's cap). What is stripped is only what names *where* a model is served or *which
# snapshot* of it: a spelling this does not recognise falls back to the default row with a
# warning, which is safe; a wrong match would not be.

# Router and cloud prefixes written with dots: "mr.claude-...", Bedrock's "anthropic.claude-..."
# and "us.anthropic.claude-...". Letters only before each dot and a letter after it, so a version
# number ("qwen3.5-plus", "gpt-4.1") can never be taken for a prefix.
_DOTTED_PREFIX = re.compile(r"^(?:[a-z]+\.)+(?=[a-z])")
# Gateway prefixes written with a colon: "openai:gpt-5.4", "anthropic:claude-opus-4-6" (pydantic-ai,
# some routers). One prefix of letters, digits, "-" or "_" and a letter after the colon, so a
# size or tag after a colon ("qwen3:32b") and Bedrock's version ("...-v1:0") are never taken for one.
_COLON_PREFIX = re.compile(r"^[a-z][a-z0-9_-]*:(?=[a-z])")
_MONTH = r"(?:0[1-9]|1[0-2])"
_DAY = r"(?:0[1-9]|[12][0-9]|3[01])"
# Snapshot and date suffixes, only in forms that cannot be a version or a size. Applied until
# none is left ("...-20260217-v1:0").
_SNAPSHOT_SUFFIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"@.*$"), ""),  # Vertex AI version pins: claude-opus-4-6@20260217, @latest
    (re.compile(r"-v[0-9]+:[0-9]+$"), ""),  # Bedrock model versions: ...-v1:0
    (re.compile(r"-latest$"), ""),  # moving aliases: claude-3-7-sonnet-latest
    (re.compile(rf"-(?:19|20)[0-9]{{2}}-{_MONTH}-{_DAY}$"), ""),  # OpenAI, Qwen: gpt-4.1-2025-04-14
    (re.compile(rf"-(?:19|20)[0-9]{{2}}{_MONTH}{_DAY}$"), ""),  # Anthropic: claude-sonnet-4-6-20260217
    (re.compile(rf"-[0-9]{{2}}{_MONTH}{_DAY}$"), ""),  # Doubao's YYMMDD: doubao-seed-1-6-250615
    # A preview's date goes, "preview" stays: a preview is not the released model (o1-preview
    # is not o1), so gemini-2.5-pro-preview-06-05 is gemini-2.5-pro-preview, not gemini-2.5-pro.
    (re.compile(rf"-(preview|exp)-(?:{_MONTH}-{_DAY}|{_MONTH}-(?:19|20)[0-9]{{2}}|{_MONTH}{_DAY})$"), r"-\1"),
)
# "4-6" and "4.6" are the same version (Anthropic ids hyphenate it); only between two digits,
# so "qwen3-max" keeps its hyphen and stays distinct from "qwen3.7-max".
_HYPHENATED_VERSION = re.compile(r"(?<=[0-9])-(?=[0-9])")


def normalise_model(model: str) -> str:
    """The one comparable spelling of a model id: lower case, no provider/router prefix, no
    date or snapshot suffix, dotted version numbers.

    "anthropic/claude-opus-4-6-20260217", "anthropic:claude-opus-4-6", "mr.claude-opus-4.6" and
    "claude-opus-4-6@20260217" all give "claude-opus-4.6"; "gpt-5.4-mini" and "claude-opus-4" stay
    what they are.
    """
    m = model.strip().lower()
    m = m.rsplit("/", 1)[-1]  # path prefixes: models/, openai/, qwen/, accounts/x/models/
    m = _COLON_PREFIX.sub("", m, count=1)
    m = _DOTTED_PREFIX.sub("", m)
    changed = True
    while changed:
        changed = False
        for pattern, repl in _SNAPSHOT_SUFFIXES:
            stripped = pattern.sub(repl, m)
            if stripped != m and stripped:
                m, changed = stripped, True
    return _HYPHENATED_VERSION.sub(".", m)


def _by_normal_form(table: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    out = {normalise_model(k): v for k, v in table.items()}
    assert len(out) == len(table), "two rows of the caps table normalise to the same model"
    return out


_CAPS = _by_normal_form(PAPER_CAPS)
_REJECTS = frozenset(normalise_model(m) for m in REJECTS_TEMPERATURE)


def builtin_caps(model: str) -> Caps | None:
    row = _CAPS.get(normalise_model(model))
    return Caps(row[0], row[1], "paper table") if row else None


def rejects_temperature(model: str) -> bool:
    return normalise_model(model) in _REJECTS


def known_model(model: str) -> bool:
    """In the protocol's tables, so its temperature behaviour is known (the protocol names every
    model of its caps table that rejects it); an unknown model gets temperature sent, with a warning."""
    m = normalise_model(model)
    return m in _CAPS or m in _REJECTS


def same_model(a: str, b: str) -> bool:
    """The same model however each is spelled and whoever serves it (provider-agnostic)."""
    return normalise_model(a) == normalise_model(b)


_IDEOGRAPH = re.compile("[\u4e00-\u9fff]")


def is_cjk(text: str) -> bool:
    """The protocol's CJK rule: more than 20 ideographs U+4E00-U+9FFF among the first 4,000 chars."""
    head = text[:CJK_WINDOW]
    if head.isascii():  # O(1) for str: English needs no scan (a Python loop here cost ~0.1 ms a call)
        return False
    for count, _ in enumerate(_IDEOGRAPH.finditer(head), start=1):
        if count > CJK_THRESHOLD:
            return True
    return False
