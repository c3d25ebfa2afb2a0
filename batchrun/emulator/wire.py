"""What the providers' wire shapes share: ids, timestamps, usage, outcomes, prompt text.

Each provider's own shapes (validation, envelopes, response bodies, result lines) live in its
module (``openai.py``, ``anthropic.py``, ``gemini.py``). Everything here is pure (no I/O, no
state).

Usage accounting (deterministic; the same for every provider):

* input tokens  = ceil(non-CJK characters of the prompt / 4) + number of CJK characters
  (U+4E00-U+9FFF), where the prompt is the text of the last user turn (the one the responder
  answers; batchrun's requests have exactly one);
* output tokens = ceil(len(answer) / 4) (a refusal counts its text; Gemini's blocked candidate
  carries no text and reports 0).
"""

from __future__ import annotations

import math
import re
import secrets
import string
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..protocol.caps import normalise_model

# Models that reject `temperature` outright (OpenAI reasoning models, newer Claude models, Kimi
# K2.6 on its OpenAI-compatible API). Matched on caps.normalise_model, so every real spelling
# counts: claude-opus-4-8 (Anthropic's id), gpt-5.4-2026-03-05 (a snapshot).
REJECTS_TEMPERATURE = {"gpt-5.4", "claude-opus-4.6", "claude-opus-4.8", "o1", "o3", "o4-mini", "kimi-k2.6"}
_REJECTS_NORMAL = frozenset(normalise_model(m) for m in REJECTS_TEMPERATURE)


def rejects_temperature(model: str) -> bool:
    return normalise_model(model or "") in _REJECTS_NORMAL

# The answer of a `garbage` fault: a judge reply that is not JSON.
GARBAGE_ANSWER = "I think it is fine."

_CJK_RE = re.compile(r"[\u4e00-\u9fff]")
_ALNUM = string.ascii_lowercase + string.digits
_B62 = string.ascii_letters + string.digits


# --------------------------------------------------------------------------- ids and times


def new_id(prefix: str = "", n: int = 24, alphabet: str = _B62) -> str:
    return prefix + "".join(secrets.choice(alphabet) for _ in range(n))


def lower_id(n: int) -> str:
    """Gemini-style id: lowercase alphanumerics only (no '-', see SDK t_file_name's [a-z0-9]+)."""
    return new_id("", n, _ALNUM)


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- usage


def count_input_tokens(text: str) -> int:
    cjk = len(text) - len(_CJK_RE.sub("", text))  # C-speed count, no list of matches
    return math.ceil((len(text) - cjk) / 4) + cjk


def count_output_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


# --------------------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    """What happened to one request. ``kind``: text | refusal | error | expired | canceled."""

    kind: str
    text: str = ""
    status: int = 200
    message: str = ""
    param: str | None = None
    code: str | None = None  # OpenAI error code override (e.g. unsupported_value)
    input_tokens: int = 0
    output_tokens: int = 0
    details: list | None = None  # google.rpc.Status details of a Gemini refusal

    @property
    def ok(self) -> bool:
        return self.kind in ("text", "refusal")

    @classmethod
    def error(cls, status: int, message: str, param: str | None = None, code: str | None = None, details: list | None = None) -> "Outcome":
        return cls("error", status=status, message=message, param=param, code=code, details=details)


# --------------------------------------------------------------------------- prompts


def text_of(content: Any, text_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type", "text") in text_types and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return ""


def last_user(messages: Any) -> Any:
    """The turn the model answers: the last user turn of a conversation (system / developer
    messages and earlier assistant or model turns are context). An item without a role counts as
    a user turn, as it does for Gemini ``contents`` and Responses ``input`` items."""
    if not isinstance(messages, list) or not messages:
        return None
    for message in reversed(messages):
        if isinstance(message, str) or (isinstance(message, dict) and message.get("role", "user") == "user"):
            return message
    return messages[-1]
