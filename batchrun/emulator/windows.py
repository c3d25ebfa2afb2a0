"""Per-model context windows: how many input tokens each model accepts, and what it says when a
request has more.

A request whose prompt counts more input tokens (``wire.count_input_tokens``: ~4 characters a
token for Latin text, 1 for each CJK ideograph) than its model's window is refused the way its
provider refuses it, online and as a per-request error line inside a batch (``Provider.too_long``):

* OpenAI: 400 ``invalid_request_error``, code ``context_length_exceeded``;
* Anthropic: 400 ``invalid_request_error`` "prompt is too long: N tokens > M maximum";
* Gemini: 400 ``INVALID_ARGUMENT`` "The input token count (N) exceeds the maximum number of tokens
  allowed (M)."

Only the input is checked (not input + ``max_tokens``): the protocol's caps are about the document.

Defaults: the paper's models (``caps.PAPER_CAPS``) get a window that holds their paper caps under
the emulator's tokenizer with room for the prompt around the document, so a run at the paper's
caps is never refused; any other model gets the default row's window. Tests and rehearsals set
their own (``Emulator(windows={model: tokens})``, ``--window MODEL=TOKENS``, ``POST
/_emulator/windows``); a window of 0 or less means "no limit". Models are matched on
``caps.normalise_model`` (``models/gemini-2.5-pro``, ``claude-opus-4-8-20260101`` ...).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

from ..protocol.caps import DEFAULT_CAPS, PAPER_CAPS, normalise_model

# Room for the prompt template and the question around a document at its cap.
PROMPT_ROOM = 4096


def window_for_caps(en: int, cjk: int) -> int:
    """The smallest window (emulator tokens) that holds documents at these caps, plus the prompt."""
    return max(math.ceil(en / 4), cjk) + PROMPT_ROOM


DEFAULT_WINDOW = window_for_caps(*DEFAULT_CAPS)
PAPER_WINDOWS: dict[str, int] = {model: window_for_caps(en, cjk) for model, (en, cjk) in PAPER_CAPS.items()}


class Windows:
    """The windows in force (thread-safe): the defaults, overridden per model."""

    def __init__(self, overrides: Mapping[str, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._table = {normalise_model(m): w for m, w in PAPER_WINDOWS.items()}
        self._overrides: dict[str, int] = {}
        self.update(overrides or {})

    def update(self, windows: Mapping[str, int]) -> None:
        """Set windows (tokens) per model; ValueError for a window that is not an integer."""
        checked = {}
        for model, tokens in windows.items():
            if isinstance(tokens, bool) or not isinstance(tokens, int):
                raise ValueError(f"window for {model!r} must be an integer number of tokens, got {tokens!r}")
            checked[normalise_model(str(model))] = tokens
        with self._lock:
            self._overrides.update(checked)

    def clear(self) -> None:
        """Back to the defaults."""
        with self._lock:
            self._overrides.clear()

    def get(self, model: str) -> int | None:
        """The model's window in tokens; None: no limit."""
        key = normalise_model(model or "")
        with self._lock:
            window = self._overrides.get(key, self._table.get(key, DEFAULT_WINDOW))
        return window if window > 0 else None

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {**self._table, **self._overrides}


def parse_window(text: str) -> tuple[str, int]:
    """``MODEL=TOKENS`` (the CLI's --window) as (model, tokens); ValueError otherwise."""
    model, sep, tokens = text.rpartition("=")
    if not sep or not model.strip():
        raise ValueError(f"--window {text!r}: expected MODEL=TOKENS, e.g. gpt-5.5=1050000")
    try:
        return model.strip(), int(tokens.replace("_", ""))
    except ValueError:
        raise ValueError(f"--window {text!r}: TOKENS must be an integer") from None
