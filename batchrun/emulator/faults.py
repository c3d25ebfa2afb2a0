"""Fault injection for the emulator.

A fault is a dict with a ``kind``, optional matchers and a ``count`` (how many times it fires;
default 1; -1 = forever). Kinds and where they are consumed:

=================  ======================================================  ====================
kind               effect                                                  consumed
=================  ======================================================  ====================
http_error         answer the API call with ``status`` in the provider's   per matching HTTP call
                   error envelope (retry-after headers set); not processed
drop               close the connection without a response; ``when``       per matching HTTP call
                   ``"before"`` (not processed) or ``"after"`` (processed)
request_error      one request (batch line or online call) gets ``status``  per processed request
garbage            the answer text becomes ``"I think it is fine."``        per processed request
expire / cancel    the batch processes the first floor(fraction*n) lines,  per created batch
                   then ends expired / cancelled
fail_validation    the batch fails as a whole (Anthropic: create -> 400)    per created batch
slow               the batch gets ``latency`` seconds                      per created batch
quota              batch creation refused for quota                        per created batch
truncate           a result-file download is cut inside its last line      per result download
corrupt_line       a batch result line is written as ``line`` (raw text,    per result line
                   ``$CUSTOM_ID`` replaced by the request's custom_id):
                   ``[1,2,3]``, ``null``, a ``result`` that is a string...
alias_batch        an Anthropic batch is also listed (first), retrieved     per created batch
                   and downloadable under the id ``id`` (a hostile listing:
                   ``x/../../PWNED``)
omit_header        the response goes out without the header ``header``      per matching HTTP call
                   (e.g. a Gemini upload start without X-Goog-Upload-URL);  that carries it
                   only responses that carry it consume the fault
echo_key           answer the API call with ``status`` (default 401) and   per matching HTTP call
                   an error message quoting the credential it presented
                   (``Bearer sk-...``, the x-api-key or x-goog-api-key);
                   not processed
echo_key_request   one request quotes the credential of the call that      per processed request
                   processed it: in its answer text, or, with ``status``,
                   in its error message
mangle_json        a JSON answer (status 200) is rewritten: ``set`` maps   per matching HTTP call
                   a field (dotted for nested: ``metadata.state``) to a    that answers JSON
                   value, ``remove`` lists fields to drop; applied to the
                   object answered and to each object of a list it holds
                   (a listing's ``data``, ``batches``, ``operations``): a
                   batch without an id, counts that are a string...;
                   or ``raw``: the whole body replaced by that text (an
                   HTML page from a proxy)
=================  ======================================================  ====================

Matchers: ``method`` (exact, case-insensitive), ``path`` (``re.search`` on the URL path, no query),
``query`` (``re.search`` on the URL's query string: ``upload_id=`` tells a Gemini upload chunk
from the upload start, both POSTs to one path), ``provider``, ``model`` (exact, bare name), ``custom_id`` (exact), ``prompt_contains`` (substring).
A matcher that is absent matches everything; a matcher the event does not carry (``model`` on an
HTTP call, ``path`` on a batch line) never matches. HTTP faults see method, path, query and provider;
request faults see provider, model, custom_id and prompt; batch faults see provider and model;
``truncate`` sees provider; ``corrupt_line`` sees provider, model and custom_id; ``omit_header``
sees method, path and provider. Faults are tried in the order they were added.

The ``echo_key`` kinds play a hostile or careless provider that repeats the caller's key (some
error pages and proxies do): the client must never store or print it.
"""

from __future__ import annotations

import copy
import math
import re
import threading
from typing import Any

KINDS = {
    "http_error",
    "drop",
    "request_error",
    "garbage",
    "expire",
    "cancel",
    "fail_validation",
    "slow",
    "truncate",
    "quota",
    "corrupt_line",
    "alias_batch",
    "omit_header",
    "echo_key",
    "echo_key_request",
    "mangle_json",
}
HTTP_KINDS = {"http_error", "drop", "echo_key"}
MATCHERS = ("method", "path", "query", "provider", "model", "custom_id", "prompt_contains")


def check_seconds(value: Any, what: str = "latency") -> float:
    """A latency in seconds: a finite number >= 0 (ValueError otherwise). NaN compares false with
    every time, so a batch given a NaN latency would never be ready; infinity never either."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a finite number of seconds, 0 or more, got {value!r}")
    return seconds


def normalize_fault(fault: Any) -> dict:
    """Validate a fault dict and fill in defaults. Raises ValueError with the reason."""
    if not isinstance(fault, dict):
        raise ValueError(f"a fault must be a JSON object, got {type(fault).__name__}")
    fault = copy.deepcopy(fault)
    kind = fault.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; expected one of {sorted(KINDS)}")
    count = fault.setdefault("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or (count < 1 and count != -1):
        raise ValueError(f"fault count must be a positive integer or -1 (forever), got {count!r}")
    if kind in ("http_error", "request_error", "echo_key"):
        fault.setdefault("status", {"http_error": 500, "request_error": 429, "echo_key": 401}[kind])
    if "status" in fault and kind in ("http_error", "request_error", "echo_key", "echo_key_request"):
        if not isinstance(fault["status"], int):
            raise ValueError(f"{kind} needs an integer status, got {fault['status']!r}")
    if kind == "drop":
        when = fault.setdefault("when", "before")
        if when not in ("before", "after"):
            raise ValueError(f"drop fault 'when' must be 'before' or 'after', got {when!r}")
    if kind in ("expire", "cancel"):
        fraction = fault.setdefault("complete_fraction", 0.5)
        if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"complete_fraction must be between 0 and 1, got {fraction!r}")
    if kind == "slow":
        latency = fault.get("latency")
        if isinstance(latency, bool) or not isinstance(latency, (int, float)):
            raise ValueError(f"slow fault needs a non-negative 'latency' in seconds, got {latency!r}")
        check_seconds(latency, "slow fault 'latency'")
    if kind == "corrupt_line" and not isinstance(fault.get("line"), str):
        raise ValueError(f"corrupt_line needs the raw 'line' text to write, got {fault.get('line')!r}")
    if kind == "alias_batch" and not (isinstance(fault.get("id"), str) and fault["id"]):
        raise ValueError(f"alias_batch needs the 'id' to list the batch under, got {fault.get('id')!r}")
    if kind == "omit_header" and not (isinstance(fault.get("header"), str) and fault["header"]):
        raise ValueError(f"omit_header needs the 'header' name to leave out, got {fault.get('header')!r}")
    if kind == "mangle_json":
        if not isinstance(fault.setdefault("set", {}), dict) or not isinstance(fault.setdefault("remove", []), list):
            raise ValueError("mangle_json needs 'set' as an object and 'remove' as a list of field names")
        if "raw" in fault and not isinstance(fault["raw"], str):
            raise ValueError("mangle_json 'raw' is the text of the whole body")
        if not fault["set"] and not fault["remove"] and "raw" not in fault:
            raise ValueError("mangle_json needs something to change: 'set', 'remove' or 'raw'")
    if "path" in fault and fault["path"] is not None:
        try:
            re.compile(fault["path"])
        except re.error as exc:
            raise ValueError(f"fault path is not a valid regex: {exc}") from None
    return fault


class FaultSet:
    """Thread-safe list of armed faults; ``take*`` atomically matches and consumes one firing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[dict] = []

    def add(self, fault: Any) -> dict:
        fault = normalize_fault(fault)
        with self._lock:
            self._faults.append(fault)
        return copy.deepcopy(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def list(self) -> list[dict]:
        with self._lock:
            return copy.deepcopy(self._faults)

    @staticmethod
    def _matches(fault: dict, info: dict) -> bool:
        if fault["kind"] == "omit_header" and str(fault["header"]).lower() not in info.get("response_headers", ()):
            return False  # consumed only by a response that has the header to leave out
        for key in MATCHERS:
            want = fault.get(key)
            if want is None:
                continue
            have = info.get(key)
            if key == "method":
                if have is None or str(have).upper() != str(want).upper():
                    return False
            elif key in ("path", "query"):
                if have is None or not re.search(want, have):
                    return False
            elif key == "prompt_contains":
                if have is None or str(want) not in have:
                    return False
            elif key == "model":
                if have is None or _bare_model(str(have)) != _bare_model(str(want)):
                    return False
            elif have != want:
                return False
        return True

    def take(self, kinds: set[str] | str, info: dict) -> dict | None:
        """Find the first armed fault of one of ``kinds`` matching ``info``; consume and return it."""
        if isinstance(kinds, str):
            kinds = {kinds}
        with self._lock:
            for i, fault in enumerate(self._faults):
                if fault["kind"] in kinds and self._matches(fault, info):
                    if fault["count"] != -1:
                        fault["count"] -= 1
                        if fault["count"] <= 0:
                            del self._faults[i]
                    return copy.deepcopy(fault)
        return None


def mangle_json(fault: dict, doc: Any) -> Any:
    """Apply a mangle_json fault to a decoded JSON answer (see the table above)."""
    targets = [doc] if isinstance(doc, dict) else []
    if isinstance(doc, dict):
        for value in doc.values():
            if isinstance(value, list):
                targets += [v for v in value if isinstance(v, dict)]
    for obj in targets:
        for dotted, value in fault["set"].items():
            *parents, leaf = dotted.split(".")
            node: Any = obj
            for name in parents:
                node = node.setdefault(name, {}) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node[leaf] = copy.deepcopy(value)
        for dotted in fault["remove"]:
            *parents, leaf = str(dotted).split(".")
            found: Any = obj
            for name in parents:
                found = found.get(name) if isinstance(found, dict) else None
            if isinstance(found, dict):
                found.pop(leaf, None)
    return doc


def _bare_model(model: str) -> str:
    return model[len("models/") :] if model.startswith("models/") else model
