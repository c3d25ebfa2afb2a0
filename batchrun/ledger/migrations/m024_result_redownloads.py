"""`batches.redownload`: a downloaded result file that went missing (or changed) before collect
read it is downloaded again from the provider, not paid for again.

The providers keep a batch's results long after it ends (OpenAI's output file until its expiration
policy deletes it, 30 days by default; Anthropic's results for 29 days after the batch's creation;
Gemini's responses file in the Files API), so a result file deleted from jobs/ (or jobs/ lost) before
collect read it is fetched again: the batch goes back from `downloaded` to `ended` and the next poll
downloads it (lifecycle.py). Before this, its requests read as "no result" and were sent, and paid
for, again: on a 481-question x 30-route night, real money.

The column says where such a batch is: NULL (never sent back); 'pending' (sent back: the next poll
downloads it again, and a 404 from a provider that otherwise answers then means the provider no
longer holds the results); 'gone' (the provider no longer held them: collect reads what is on disk,
as before this migration, and says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute("ALTER TABLE batches ADD COLUMN redownload TEXT")
