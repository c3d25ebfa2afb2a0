"""cell_status finds each cell's judge requests by (parent, judge route, judge policy). Without this
index SQLite used requests_route and scanned every judge request of a judge for every (cell,
judge) pair: quadratic, minutes per collect at WildTrace scale (bench/ingest.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute("CREATE INDEX requests_parent_route_policy ON requests (parent_custom_id, route, policy_fp)")
