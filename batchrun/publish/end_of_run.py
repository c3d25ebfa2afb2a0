"""What `refresh` and `demo` publish at the end of a run: a snapshot, the report, the site.

One function so the two stay the same: record the state as this run leaves it (snapshots), build
the full report (leaderboard, provenance, statistics, changes since the last refresh) and write
the static site to results/site/.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ledger.inputs import Inputs
from ..ledger.store import Store
from ..protocol.config import Config
from . import snapshots
from .analysis import Settings, full_report
from .outputs import judge_scores, leaderboard


@dataclass(frozen=True)
class Published:
    data: dict[str, Any]  # the full report (render it with report.render)
    site: Path  # index.html


def site_dir(config: Config) -> Path:
    return config.paths.results / "site"


def publish(store: Store, inputs: Inputs, *, command: str, settings: Settings = Settings()) -> Published:
    """`inputs`: the command's (refresh's, demo's), resolved at its top."""
    from .site import write_site

    config = inputs.config
    store.check_same_file()  # never publish from a state.db deleted or replaced under the run
    board = leaderboard(store)  # fills cells_now, read by everything below
    snapshots.take(store, command, snapshots.current_state(store, board))
    judgments = judge_scores(store, with_text=True)
    data = full_report(store, inputs, settings, judgments=judgments, board=board)
    return Published(data, write_site(store, config, data, site_dir(config), judgments=judgments))
