"""Path components for names a provider chose.

Batch ids, file ids and file names come from the provider's answers, and a broken or hostile
provider can answer anything: an Anthropic batch listed as `../../…/PWNED` once made the adoption
path write outside the project. Every such name goes through `safe_component` before it becomes
part of a path under jobs/; nothing else about a provider's name is trusted.
"""

from __future__ import annotations

import hashlib

from .redaction import redact

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
# Real ids are short (`msgbatch_01…` 33, `batch_…` 38, `batches/…` 40 characters); filesystems
# refuse components over 255 bytes. Longer encodings keep a prefix and a hash of the whole name.
MAX_COMPONENT = 120


def safe_component(name: object) -> str:
    """One path component (no separator, never `.` or `..`) that stands for `name`.

    Characters outside [A-Za-z0-9._-] are percent-encoded byte by byte (`%` itself included, so
    two names never share an encoding); names made of dots only have their dots encoded; an
    encoding longer than MAX_COMPONENT is shortened to a prefix plus the sha256 of the name. A
    key in the name is replaced by [REDACTED] first.
    """
    # A provider can echo the caller's key in a name as anywhere else: never in a file name
    # (redaction.py). Its hash would not do either: a short key's hash can be brute-forced.
    text = redact(str(name))
    out = "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")) for c in text)
    if not out.strip("."):
        out = out.replace(".", "%2E") or "%"  # "", ".", "..": never the folder itself or its parent
    if len(out) > MAX_COMPONENT:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        out = f"{out[:MAX_COMPONENT - 34]}~{digest}"  # "~" is never produced by the encoding
    return out
