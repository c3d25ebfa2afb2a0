"""The BLAKE3 checksum of each request file, recorded by plan and verified by submit and `batchrun
verify` (checksums.py: ~5 GB/s on one core against SHA-256's ~1.1, for files that run to 17 GB a
night at 30 routes). Batches planned from now on leave `sha256` NULL; those planned before keep
their SHA-256, and are still checked with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute("ALTER TABLE batches ADD COLUMN blake3 TEXT")
