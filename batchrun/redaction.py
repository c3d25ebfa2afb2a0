"""Keys never leave the process: the one redaction of everything batchrun stores, prints or logs.

batchrun reads keys from the environment at call time and never writes them itself, but a
provider (or a proxy in front of it) may repeat the caller's key in what it answers: OpenAI's 401
says "Incorrect API key provided: sk-...", some gateways echo the `Authorization` header, and a
model can be made to repeat it in an answer. Everything that enters batchrun from a provider goes
through `redact` before it reaches state.db, jobs/, results/ or stderr: classified errors
(clients.classify), the sync transport's lines (poll), downloaded result files (poll, submit's
adoption), result rows at collect, batch error and status columns, progress and error output.

Redacted: the value of every key variable batchrun knows (each route's `api_key_env`, and each
provider SDK's alternative key variable, `Adapter.alt_key_env`, registered when a config is
loaded), as written and as JSON-escaped, and
anything shaped like a bearer token (`Bearer ` and a long token with a digit in it), whoever's it
is. A "key" shorter than MIN_KEY_CHARS is not redacted: no provider issues one that short, and
replacing a few common characters everywhere would corrupt answers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

REDACTED = "[REDACTED]"
MIN_KEY_CHARS = 8

# Key variables seen in a config or read by clients.api_key.
_key_variables: set[str] = set()

# "Bearer" and a token of 16+ URL-safe characters with at least one digit: the shape of every
# provider key and OAuth token, and not of prose ("Bearer authentication", "bearer bonds").
_BEARER_PATTERN = r"(?i)\bbearer\s+(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{16,}"
_BEARER = re.compile(_BEARER_PATTERN)
_BEARER_BYTES = re.compile(_BEARER_PATTERN.encode())


def know_key_variables(names: Iterable[str]) -> None:
    """Remember environment variables that hold keys (called when a config is loaded)."""
    _key_variables.update(n for n in names if n)


_cache: tuple[tuple[str, ...], list[str]] = ((), [])


def known_keys() -> list[str]:
    """The current values of the known key variables (read now: keys are read at call time)."""
    global _cache
    values = tuple(v for name in sorted(_key_variables) if len(v := os.environ.get(name, "")) >= MIN_KEY_CHARS)
    if values != _cache[0]:
        # Each as written and as it appears inside a JSON string; longest first, so a key
        # containing another key is replaced whole.
        keys = {form for v in values for form in (v, json.dumps(v)[1:-1])}
        _cache = (values, sorted(keys, key=len, reverse=True))
    return _cache[1]


def redact(text: str, keys: list[str] | None = None) -> str:
    """`text` with every known key and bearer token replaced by [REDACTED].

    `keys`: known_keys(), computed once by a caller that redacts many lines."""
    if not text:
        return text
    for key in known_keys() if keys is None else keys:
        if key in text:
            text = text.replace(key, REDACTED)
    if _may_hold_bearer(text):
        text = _BEARER.sub("Bearer " + REDACTED, text)
    return text


def redact_file(path: Path) -> None:
    """Rewrite a downloaded file without keys (line by line; unchanged files are not touched)."""
    if not path.exists():
        return
    keys = [k.encode() for k in known_keys()]
    dirty = False
    with open(path, "rb") as f:
        for raw in f:
            if any(k in raw for k in keys) or (_may_hold_bearer(raw) and _BEARER_BYTES.search(raw)):
                dirty = True
                break
    if not dirty:
        return
    tmp = path.with_name(path.name + ".redacting")
    text_keys = known_keys()
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        for raw in src:
            text = raw.decode("utf-8", "surrogateescape")
            dst.write(redact(text, text_keys).encode("utf-8", "surrogateescape"))
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)


def _may_hold_bearer(text: str | bytes) -> bool:
    # A substring test is a fast scan; the regex runs only on the rare text that passes it.
    if isinstance(text, bytes):
        return b"earer" in text or b"EARER" in text
    return "earer" in text or "EARER" in text
