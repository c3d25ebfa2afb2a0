"""batchrun: long-document LLM leaderboard evaluations through the providers' batch APIs.

The library under the CLI, for scripts and notebooks::

    from batchrun import load_config, Store, refresh
    config = load_config("batchrun.toml")
    store = Store(config.paths.state)
    outcome = refresh(store, config)
"""

from .collect import collect
from .config import Config, Route
from .config_file import load_config
from .errors import (
    BatchrunError,
    ConfigError,
    DataError,
    LockError,
    ProviderError,
    StateError,
)
from .plan import plan
from .poll import poll
from .refresh import refresh
from .outputs import leaderboard, report_data
from .store import Store
from .submit import submit
from .version import __version__

__all__ = [
    "BatchrunError", "Config", "ConfigError", "DataError", "LockError", "ProviderError", "Route", "StateError",
    "Store", "collect", "leaderboard", "load_config", "plan", "poll", "refresh", "report_data", "submit",
    "__version__",
]
