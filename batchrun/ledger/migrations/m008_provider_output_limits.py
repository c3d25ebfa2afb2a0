"""What a broken or hostile provider's output may cost is bounded, and recorded.

- `batches.download_attempts`: result downloads of the batch so far, across runs. A file that
  is cut short every time is fetched a bounded number of times (poll.MAX_DOWNLOAD_ATTEMPTS),
  then accepted as it is, with `batches.download_truncated` = 1: the requests in its
  unreadable tail get `missing` rows and are resubmitted.
- `results.truncated` = 1: the stored `text` (and `raw_json`) of that line was cut to
  collect.MAX_STORED_CHARS; the whole line stays in the batch's file under jobs/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute("ALTER TABLE batches ADD COLUMN download_attempts INTEGER")
    db.execute("ALTER TABLE batches ADD COLUMN download_truncated INTEGER")
    db.execute("ALTER TABLE results ADD COLUMN truncated INTEGER")
