"""Keys never leave the process: the one redaction of everything batchrun stores, prints or logs.

batchrun reads keys from the environment at call time and never writes them itself, but a
provider (or a proxy in front of it) may repeat the caller's key in what it answers: OpenAI's 401
says "Incorrect API key provided: sk-...", some gateways echo the `Authorization` header, and a
model can be made to repeat it in an answer. Everything that enters batchrun from a provider goes
through `redact` before it reaches state.db, jobs/, results/ or stderr: classified errors
(clients.classify), the sync transport's lines (poll), downloaded result files (poll, submit's
adoption), result rows and the text decoded from them at collect, batch error and status columns,
progress and error output.

Redacted: the value of every key variable batchrun knows (each route's `api_key_env`, and each
provider SDK's alternative key variable, `Adapter.alt_key_env`, registered when a config is
loaded), whatever its length, and anything shaped like a bearer token (`Bearer ` and a long token
with a digit in it), whoever's it is.

A key is found as written, as it appears inside a JSON string, and hidden behind JSON escapes: a
result line may spell `sk-…` as `\\u0073k-…`, or `/` as `\\/`, and a JSON text inside a JSON
string doubles the backslashes (`\\\\u0073`). Escapes of the characters a key is made of are
decoded (every level at once) before looking, and a key found that way is replaced where it
stands in the text as given, escapes included: the rest of the text keeps its bytes, so a raw
result line stays the provider's line (valid JSON, every other escape and number as sent) with
only the key gone. Decoding the whole line and encoding it again would lose what an auditor
reads raw_json for (spelling, key order, duplicate keys, numbers as written); enumerating the
escaped spellings of a key cannot work (each of its characters may be escaped or not). A key
percent-encoded, as a provider echoing a request URL writes it (`?key=sk%2Dproj…`, or every
character `%73%6B…`: RFC 3986 section 2.1), is found and replaced the same way.

A key may also come back *masked*: OpenAI's 401 quotes a wrong key as its first 8 and last 4
characters around a run of asterisks ("Incorrect API key provided: sk-proj-****MxYA", as its
community threads show: continuedev/continue#9634), and gateways mask it their own way
(`sk-abcd1***...wxyz`, `••••wxyz`). Those visible characters are a part of the key: a run of mask
characters (`*`, `•`, `●`, `·`, `.`: three or more; or an ellipsis character, `…`) with a suffix of a known key after it (2
characters or more) and a prefix of it, or nothing, before it (4 characters or more together, and
fewer than the key) is redacted whole, the mask included. A prefix alone is left: it is the
provider's public part (`sk-proj-`), and texts that explain key formats hold it.

A key shorter than SHORT_KEY_CHARS (8: no provider issues one, but a placeholder for a local
server can be one: "x", "null", "text", "EMPTY", "1234") is also ordinary text. It is redacted
only where it stands alone, not inside a longer run of letters, digits, `-` and `_` (the
characters keys are made of): replacing every "x", or "text" inside "context", would rewrite
answers, and the judges would grade the damage. In a provider's JSON line (`redact_json_line`) it
is redacted inside string values only, never in an object's key names, in `true`/`false`/`null`
or numbers, in a value that is nothing but the key (it may be the format's own word: "text" is
the type of Anthropic's and OpenAI's content parts), or in batchrun's own request ids: otherwise
the line would read differently (a content part no longer "text" is an empty answer, a 0) or
lose its custom_id (its request would be sent again and again). The text decoded from the line
is redacted again, whole (collect). The rule is said once at start-up (`short_key_warnings`).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REDACTED = "[REDACTED]"
# Below this many characters a key is ordinary text too: redacted only where it stands alone,
# and said at start-up (see the module docstring). No provider issues a key this short.
SHORT_KEY_CHARS = 8

# Key variables seen in a config or read by clients.api_key.
_key_variables: set[str] = set()
_warned: set[str] = set()

# "Bearer" and a token of 16+ URL-safe characters with at least one digit: the shape of every
# provider key and OAuth token, and not of prose ("Bearer authentication", "bearer bonds").
_BEARER_PATTERN = r"(?i)\bbearer\s+(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{16,}"
_BEARER = re.compile(_BEARER_PATTERN)
_BEARER_BYTES = re.compile(_BEARER_PATTERN.encode())

# One JSON string literal (the text between its quotes), and whether it is an object's key name.
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:)?')
# batchrun's request ids (ledger.generation_custom_id, judge_custom_id): never a provider's words.
_OWN_ID = re.compile(r"[gj]-[0-9a-f]{40}")

# Nested escapes of escapes (`\u005cu0073`: an escaped backslash before "u0073") need another pass.
_MAX_PASSES = 3

# A masked echo of a key (see the module docstring): the run of mask characters it is found by,
# the quick tests that skip texts without one, and the characters a key's visible parts are made of.
_MASK_CHARS = frozenset("*•●·….")
_MASK_RUN = re.compile(r"[*•●·….]{3,}|[*•●·.]*…[*•●·….]*")  # three or more, or an ellipsis character
_MASK_HINTS = ("***", "•", "●", "·", "…", "...", "*.", ".*")
_MASK_HINTS_BYTES = tuple(h.encode() for h in _MASK_HINTS)
_MASK_CHARS_WIDE = ("•", "●", "·", "…")  # the hints that are not ASCII
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def know_key_variables(names: Iterable[str]) -> None:
    """Remember environment variables that hold keys (called when a config is loaded)."""
    _key_variables.update(n for n in names if n)


@dataclass(frozen=True)
class Keys:
    """The current key values, compiled for redaction (known_keys)."""

    forms: tuple[str, ...]  # keys of SHORT_KEY_CHARS or more: as written and JSON-escaped, longest first
    tokens: re.Pattern[str] | None  # the shorter keys (and their JSON forms), where they stand alone
    values: re.Pattern[str] | None  # every key value (short ones as tokens), looked for in decoded text
    escapes: re.Pattern[str] | None  # the escapes a key could hide behind
    escapes_bytes: re.Pattern[bytes] | None
    forms_bytes: tuple[bytes, ...]
    # The keys of SHORT_KEY_CHARS or more, whose masked echoes are looked for.
    masks: tuple[str, ...] = ()
    # The percent-encodings (RFC 3986 section 2.1) a key could hide behind: `%73k-…`.
    percents: re.Pattern[str] | None = None
    percents_bytes: re.Pattern[bytes] | None = None
    # The keys of SHORT_KEY_CHARS or more, and the shorter ones, apart (redact_json_line); None
    # when every key is of the first kind.
    strong: Keys | None = None
    weak: Keys | None = None

    def __bool__(self) -> bool:
        return self.values is not None


_NO_KEYS = Keys((), None, None, None, None, ())
_cache: tuple[tuple[str, ...], Keys] = ((), _NO_KEYS)


def _token(alternatives: Iterable[str]) -> str:
    """A regex for any of `alternatives` not inside a longer run of letters, digits, - and _."""
    body = "|".join(re.escape(a) for a in sorted(set(alternatives), key=len, reverse=True))
    return rf"(?<![A-Za-z0-9_-])(?:{body})(?![A-Za-z0-9_-])"


def _json_forms(value: str) -> set[str]:
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}


def known_keys() -> Keys:
    """The current values of the known key variables (read now: keys are read at call time)."""
    global _cache
    values = tuple(sorted({v for name in _key_variables if (v := os.environ.get(name, ""))}))
    if values != _cache[0]:
        _cache = (values, _compile(values))
    return _cache[1]


def _compile(values: tuple[str, ...], *, split: bool = True) -> Keys:
    if not values:
        return _NO_KEYS
    long_ = tuple(v for v in values if len(v) >= SHORT_KEY_CHARS)
    short = tuple(v for v in values if len(v) < SHORT_KEY_CHARS)
    halves: dict[str, Keys] = {"strong": _compile(long_, split=False), "weak": _compile(short, split=False)} if split and short else {}
    # Longest first, so a key containing another key is replaced whole.
    forms = tuple(sorted({f for v in long_ for f in _json_forms(v)}, key=len, reverse=True))
    tokens = re.compile(_token(f for v in short for f in _json_forms(v))) if short else None
    parts = ["|".join(re.escape(v) for v in sorted(long_, key=len, reverse=True))] if long_ else []
    if short:
        parts.append(_token(short))
    escape = _escape_pattern(values)
    percent = _percent_pattern(values)
    return Keys(forms=forms, tokens=tokens, values=re.compile("|".join(parts)), escapes=re.compile(escape),
                escapes_bytes=re.compile(escape.encode()), forms_bytes=tuple(f.encode("utf-8", "surrogateescape") for f in forms),
                masks=long_, percents=re.compile(percent), percents_bytes=re.compile(percent.encode()), **halves)


def _escape_pattern(values: tuple[str, ...]) -> str:
    """A regex for one JSON escape of a character some key holds, at any depth of nesting:
    `\\u0073`, `\\\\u0073`, `\\\\\\\\u0073` (a JSON text inside a JSON string doubles the backslashes),
    `\\/` where a key holds "/", and `\\u005c`, an escaped backslash that can start another escape.
    Only those: escapes of other characters (`\\u003c` for "<", `\\u00e9`, every CJK character of an
    ASCII-escaped answer) cannot spell a key, and decoding them would cost time on every line."""
    chars = {c for v in values for c in v}
    codes = "|".join(f"{ord(c):04x}" for c in sorted(chars | {"\\"}) if ord(c) <= 0xFFFF)
    slash = "|/" if "/" in chars else ""
    # A literal backslash first (then any more): re finds a literal prefix with a fast scan, where
    # `\\+` would be tried at every position of the line (15x slower on a 3 KB answer).
    # Only at the first backslash of a run (`(?<!\\\\)`: the one before it is not one): tried at
    # every backslash, `\\*` ran to the end of the run each time, quadratic in a run of them (a
    # megabyte of backslashes in an answer: over a minute of collect). The matches are the same.
    return rf"\\(?<!\\\\)\\*(?:u((?i:{codes})){slash})"


def _percent_pattern(values: tuple[str, ...]) -> str:
    """A regex for one percent-encoding of a character some key holds (`%73`, `%2D`, `%2F`), and
    of `%` itself (`%2573`: encoded twice). A provider that echoes a request URL (a `?key=`
    parameter, a gateway's log line) writes a key so, and `%XX` of any character means that
    character in a URL (RFC 3986 section 2.1): `sk%2Dproj…` and `%73%6B…` are the key."""
    codes = "|".join(f"{ord(c):02x}" for c in sorted({c for v in values for c in v} | {"%"}) if ord(c) < 0x80)
    return rf"%((?i:{codes}))"


def short_key_warnings() -> list[str]:
    """One warning per key variable whose value is shorter than SHORT_KEY_CHARS, the first time it
    is seen in this process: what redaction does with it (see the module docstring)."""
    out = []
    for name in sorted(_key_variables):
        value = os.environ.get(name, "")
        if not value or len(value) >= SHORT_KEY_CHARS or name in _warned:
            continue
        _warned.add(name)
        out.append(f"the key in {name} is only {len(value)} character(s) long; no provider issues keys that short. "
                   "It is never stored or printed where it stands alone, but not inside a longer run of letters, "
                   "digits, - and _, nor where it is a provider's own word in its JSON (a value that is only the "
                   "key); answers that hold it alone are stored, shown and judged with [REDACTED] in its place. "
                   "Use a key of 8 characters or more (a local server that takes any key takes a long one too).")
    return out


def redact(text: str, keys: Keys | None = None) -> str:
    """`text` with every known key and bearer token replaced by [REDACTED].

    `keys`: known_keys(), computed once by a caller that redacts many lines."""
    if not text:
        return text
    k = known_keys() if keys is None else keys
    if k:
        for form in k.forms:
            if form in text:
                text = text.replace(form, REDACTED)
        if k.tokens is not None:
            text = k.tokens.sub(REDACTED, text)
        if "\\" in text:
            text = _redact_escaped(text, k, k.escapes)
        if "%" in text:
            text = _redact_escaped(text, k, k.percents)
        if k.masks and _may_hold_mask(text):
            text = _redact_masked(text, k.masks)
    if _may_hold_bearer(text):
        text = _BEARER.sub("Bearer " + REDACTED, text)
    return text


def redact_json_line(text: str, keys: Keys | None = None) -> str:
    """One line of a provider's JSON (a result line, an online answer) without keys, reading as
    the same JSON for everything but them (see the module docstring: short keys only in values)."""
    k = known_keys() if keys is None else keys
    if k.weak is None:
        return redact(text, k)  # every key is 8 characters or more: anywhere, as in any text
    text = redact(text, k.strong)
    if not text or redact(text, k.weak) == text:
        return text
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return redact(text, k.weak)  # not JSON: nothing to keep readable, redacted as text
    weak = k.weak

    def value(m: re.Match[str]) -> str:
        inner = m.group(1)
        if m.group(2) is not None or _OWN_ID.fullmatch(inner):
            return m.group(0)  # a key name, or one of batchrun's ids: structure, never the key
        cleaned = redact(inner, weak)
        if cleaned == inner or cleaned == REDACTED:
            return m.group(0)  # nothing, or nothing but the key: maybe the format's own word
        return f'"{cleaned}"'

    return _JSON_STRING.sub(value, text)


def _may_hold_mask(text: str) -> bool:
    """Whether `text` holds one of _MASK_HINTS: the quick test before _redact_masked.

    The same answer as `any(h in text for h in _MASK_HINTS)` in fewer scans: collect redacts
    every result line and the text decoded from it, and on prose full of full stops the
    two-character hints (`*.`, `.*`) are slow scans. `*` is looked for once, its hints only in
    a text that has one; the wider characters only in a text that is not ASCII (isascii() is
    O(1) on str). bench/ingest.py's 58 MB of answer lines: 0.17 -> 0.045 s a pass."""
    if "*" in text and ("***" in text or "*." in text or ".*" in text):
        return True
    if "..." in text:
        return True
    return not text.isascii() and any(c in text for c in _MASK_CHARS_WIDE)


def _redact_masked(text: str, keys: tuple[str, ...]) -> str:
    """`text` without masked echoes of `keys` (see the module docstring)."""
    out: list[str] = []
    last = 0
    key_chars = _KEY_CHARS | {c for key in keys for c in key if c not in _MASK_CHARS}
    for m in _MASK_RUN.finditer(text):
        start, end = m.span()
        while start > last and text[start - 1] in key_chars:
            start -= 1
        while end < len(text) and text[end] in key_chars:
            end += 1
        before, after = text[start:m.start()], text[m.end():end]
        if not any(_masked(key, before, after) for key in keys):
            continue
        out += [text[last:start], REDACTED]
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _masked(key: str, before: str, after: str) -> bool:
    """Whether `before`, a mask and `after` can be `key` masked: its suffix after the mask (2
    characters or more), its prefix or nothing before, 4 to len(key) - 1 characters shown."""
    shown = len(before) + len(after)
    return len(after) >= 2 and 4 <= shown < len(key) and key.endswith(after) and key.startswith(before)


class _Decoded:
    """One pass of decoding escapes: the text it gives, and where each of its characters came from."""

    def __init__(self, text: str, pattern: re.Pattern[str]):
        self.text_in = text
        out: list[str] = []
        self.at_out: list[int] = []  # per escape: its character's index in the output
        self.span_in: list[tuple[int, int]] = []  # per escape: where it was in the input
        last = 0
        n = 0
        for m in pattern.finditer(text):
            out.append(text[last:m.start()])
            n += m.start() - last
            code = m.group(1)
            out.append(chr(int(code, 16)) if code is not None else "/")
            self.at_out.append(n)
            self.span_in.append(m.span())
            n += 1
            last = m.end()
        out.append(text[last:])
        self.text = "".join(out)

    def start(self, i: int) -> int:
        """Where output character i starts in the input."""
        k = bisect.bisect_right(self.at_out, i) - 1
        if k < 0:
            return i
        if self.at_out[k] == i:
            return self.span_in[k][0]
        return self.span_in[k][1] + (i - self.at_out[k] - 1)

    def end(self, i: int) -> int:
        """Where output character i ends in the input."""
        k = bisect.bisect_right(self.at_out, i) - 1
        if k >= 0 and self.at_out[k] == i:
            return self.span_in[k][1]
        return self.start(i) + 1


def _redact_escaped(text: str, k: Keys, escapes: re.Pattern[str] | None) -> str:
    """`text` with every key spelt with `escapes` (JSON's, or percent-encodings) replaced where it
    stands (see the module docstring)."""
    assert escapes is not None and k.values is not None
    if not escapes.search(text):
        return text
    passes: list[_Decoded] = []
    current = text
    spans: list[tuple[int, int]] = []
    for _ in range(_MAX_PASSES):
        d = _Decoded(current, escapes)
        if not d.at_out:
            break
        passes.append(d)
        current = d.text
        for m in k.values.finditer(current):
            a, b = m.start(), m.end() - 1  # first and last character of the key in this pass's text
            for p in reversed(passes):
                a, b = p.start(a), p.end(b) - 1
            spans.append((a, b + 1))
        if not escapes.search(current):
            break
    if not spans:
        return text
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    out = []
    last = 0
    for a, b in merged:
        out += [text[last:a], REDACTED]
        last = b
    out.append(text[last:])
    return "".join(out)


def needs_redaction(raw: bytes, keys: Keys) -> bool:
    """A fast test on a raw line: False when `redact_json_line` would surely leave it as it is."""
    if keys:
        if any(f in raw for f in keys.forms_bytes) or keys.tokens is not None or (
                keys.escapes_bytes is not None and keys.escapes_bytes.search(raw)) or (
                keys.percents_bytes is not None and b"%" in raw and keys.percents_bytes.search(raw)) or (
                keys.masks and any(h in raw for h in _MASK_HINTS_BYTES)):
            text = raw.decode("utf-8", "surrogateescape")
            if redact_json_line(text, keys) != text:
                return True
    return _may_hold_bearer(raw) and _BEARER_BYTES.search(raw) is not None


def redact_file(path: Path) -> None:
    """Rewrite a downloaded file without keys (line by line; unchanged files are not touched)."""
    if not path.exists():
        return
    keys = known_keys()
    with open(path, "rb") as f:
        dirty = any(needs_redaction(raw, keys) for raw in f)
    if not dirty:
        return
    tmp = path.with_name(path.name + ".redacting")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        for raw in src:
            text = raw.decode("utf-8", "surrogateescape")
            dst.write(redact_json_line(text, keys).encode("utf-8", "surrogateescape"))
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)


def _may_hold_bearer(text: str | bytes) -> bool:
    # A substring test is a fast scan; the regex runs only on the rare text that passes it. The
    # regex ignores case, as HTTP's auth scheme does (RFC 9110 section 11.1), so this test must too
    # ("BeArEr <token>" is a bearer token): lower() is a superset test, since no character but
    # b/B, e/E, a/A, r/R lowers to those letters or matches them under re's IGNORECASE. It costs about as much as two case-sensitive scans on ASCII (100k
    # of collect's raw lines: 0.24 s against 0.26 s) and ~10 us per 1,500 CJK characters, where
    # str.lower() looks each character up.
    if isinstance(text, bytes):
        return b"bearer" in text.lower()
    return "bearer" in text.lower()


def redact_python_output() -> None:
    """What Python itself prints on stderr, shown redacted: warnings (a library's may quote a
    provider's words: google-genai warns "<value> is not a valid FinishReason",
    _common.CaseInSensitiveEnum._missing_, the key if a provider echoes it there) and the
    traceback of an unexpected error (a bug keeps its traceback, but an exception's message or a
    line of it may hold what a provider sent). Installed once per process (cli.log_to_stderr)."""
    import sys
    import traceback
    import warnings

    shown = warnings.showwarning
    if not getattr(shown, "batchrun", False):
        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            shown(redact(str(message)), category, filename, lineno, file, line)

        show.batchrun = True  # type: ignore[attr-defined]
        warnings.showwarning = show
    hook = sys.excepthook
    if not getattr(hook, "batchrun", False):
        def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            try:
                text = redact("".join(traceback.format_exception(kind, value, tb)))
            except Exception:  # noqa: BLE001 - never lose the traceback to its redaction
                hook(kind, value, tb)
                return
            sys.stderr.write(text)
            sys.stderr.flush()

        excepthook.batchrun = True  # type: ignore[attr-defined]
        sys.excepthook = excepthook
