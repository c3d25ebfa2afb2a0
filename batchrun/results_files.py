"""Writing a results/ file only when its bytes would change.

Every collect used to rewrite every route's responses and scores files (64 files, ~66 MB at 32
routes and 100k results) and the manifest, whatever it had collected. Rendering a file with
indent=2 goes through json's pure-Python encoder (CPython has a C encoder only without indent),
so that was most of the time a collect spends in `write_results` when nothing changed.

Now each file's data is fingerprinted first by the C encoder, and state.db (`results_files`, m016)
records, per file, the fingerprint of the data it holds and the sha256 of the bytes written. A file
is left alone when both still match: the data is the same, and the file on disk is still exactly
what batchrun wrote (a deleted or hand-edited file is written again). The record is made after the
file is in place, so a crash in between leaves an old record, and the next collect writes again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .checksums import file_digest
from .store import Store

# How a file's data becomes its bytes; part of every fingerprint. Change it whenever `render`
# would turn the same data into other bytes, so that every file is written again.
RENDERING = "batchrun-results-json/1: json.dumps(ensure_ascii=False, indent=2) + LF, UTF-8"


def render(data: Any) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def fingerprint(data: Any) -> str:
    """sha256 of `data` as json's C encoder writes it (compact, ASCII escapes: any string, a lone
    surrogate included, encodes, and different data gives different text), ~10x faster than
    rendering the file."""
    h = hashlib.sha256(RENDERING.encode("ascii"))
    h.update(json.dumps(data, separators=(",", ":")).encode("ascii"))
    return h.hexdigest()


def _write_atomic(path: Path, data: bytes, *, private: bool) -> None:
    """A reader never sees half a results file. `private`: through mkstemp (mode 0600, as the
    route files always were); otherwise the process umask's mode (the manifest, as it always was)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if private:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        tmp = Path(name)
    else:
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not also leave half a file behind
        raise


def publish(store: Store, path: Path, data: Any, *, fingerprint_of: Any = None, private: bool = True) -> str:
    """Make `path` hold `data` rendered, writing it only if it does not already; its sha256.
    `private`: as for _write_atomic.

    `fingerprint_of`: what decides whether the file is current, when not all of `data` (the
    manifest's `written_at` changes on every call, and alone is no reason to write it again)."""
    fp = fingerprint(data if fingerprint_of is None else fingerprint_of)
    key = str(path)
    row = store.db.execute("SELECT fingerprint, sha256 FROM results_files WHERE path = ?", [key]).fetchone()
    if row is not None and row[0] == fp and path.is_file() and file_digest(path) == row[1]:
        return str(row[1])
    content = render(data)
    _write_atomic(path, content, private=private)
    sha = hashlib.sha256(content).hexdigest()
    with store.db.atomic():
        store.db.execute("INSERT OR REPLACE INTO results_files (path, fingerprint, sha256, written_at) VALUES (?, ?, ?, ?)",
                         [key, fp, sha, time.time()])
    return sha
