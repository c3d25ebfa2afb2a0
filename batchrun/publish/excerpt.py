"""The part of a corpus document a task page shows: its beginning, read from the corpus folder
as the harness reads it, and only if the file still is the document the models were sent.

state.db keeps each document's checksum and length, not its text (a WildTrace document runs to
2.85 M characters; copying the corpus into every site would make a 481-page site hundreds of MB).
So the site reads the text from the corpus folder the config names, and shows at most
EXCERPT_CHARS characters of it, saying how many there are: the models saw the whole document (or
none of it, beyond their cap), and the page says which, but a page stays a few tens of KB.

A file that is missing, unreadable, or no longer the document that was sent (its sha256
differs from the one recorded in state.db: edited since) is not shown; the page says why. The
check costs no read when state.db's measurement cache (document_files: path, size, mtime) still
matches the file; otherwise the file is hashed once, in pieces.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import DataError
from ..base.userfiles import NotRegularFile, open_regular
from ..ledger.store import Store
from ..protocol.corpus import read_document, resolve

EXCERPT_CHARS = 20_000


@dataclass(frozen=True)
class Excerpt:
    text: str | None  # the first EXCERPT_CHARS characters (or the whole document), None when not shown
    why_not: str | None  # why there is no text, for the page


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:
        while piece := f.read(1 << 20):
            h.update(piece)
    return h.hexdigest()


def read_excerpt(store: Store, corpus_dir: Path, corpus_file: str, sha256: str, *, limit: int = EXCERPT_CHARS) -> Excerpt:
    """The beginning of `corpus_file` if it is still the document whose checksum is `sha256`."""
    try:
        _, path = resolve(corpus_dir, corpus_file, where="the dataset")
        st = path.stat()
        cached = store.db.execute("SELECT size, mtime_ns, sha256 FROM document_files WHERE path = ?", [str(path)]).fetchone()
        current = cached[2] if cached and tuple(cached[:2]) == (st.st_size, st.st_mtime_ns) else _sha256(path)
        if current != sha256:
            return Excerpt(None, f"{path} has changed since it was sent (sha256 {current[:12]}…, sent {sha256[:12]}…): "
                                 "its text is not the document the models saw.")
        return Excerpt(read_document(path, where=str(path), limit=limit), None)
    except FileNotFoundError:
        return Excerpt(None, f"{corpus_file} is not in the corpus folder {corpus_dir} (moved or deleted since it was sent).")
    except NotRegularFile as e:
        return Excerpt(None, f"{e}.")
    except DataError as e:  # outside the corpus folder, not UTF-8: read_document's and resolve's message
        return Excerpt(None, e.message)
    except OSError as e:
        return Excerpt(None, f"cannot read {corpus_file} in {corpus_dir}: {e.strerror or e}.")
