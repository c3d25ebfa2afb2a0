"""What collect last wrote to each results/ file (outputs.write_results): a fingerprint of the data
the file renders and the sha256 of the bytes written. A collect whose data for a file is
unchanged, and finds the file still those bytes, leaves it alone instead of rewriting every
route's files (64 files, ~66 MB at 32 routes). Recorded after the file is in place, so a crash in
between leaves an old record and the next collect writes the file again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute(
        """CREATE TABLE results_files (
            path TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, sha256 TEXT NOT NULL, written_at REAL NOT NULL)"""
    )
