"""A document's length and CJK flag depend on how its bytes are read as text. batchrun first kept
\\r\\n and lone \\r as they are; the reference harness reads with universal newlines
(corpus.READING). Measurements are cached per reading here, keyed by it, so a store measured under
an older rule re-measures every document once and its `documents` rows (chars and cjk as first
measured) stay as they were, for audit. `document_files` (path -> sha256 of the bytes) does not
depend on the reading and stays valid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute(
        """CREATE TABLE document_readings (
            sha256 TEXT NOT NULL, reading TEXT NOT NULL, chars INTEGER NOT NULL, cjk INTEGER NOT NULL,
            measured_at REAL NOT NULL, newlines_translated INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (sha256, reading))"""
    )
