"""The sha256 of each result file as downloaded (or, for the sync transport, as written when its last
answer arrived), in the order of result_files_json: collect reads a file only if it is still those
bytes, so an answer edited on disk is never scored as the provider's. NULL for batches downloaded
before this column (nothing to compare with: read as before).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute("ALTER TABLE batches ADD COLUMN result_files_sha256_json TEXT")
