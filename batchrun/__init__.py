"""batchrun: long-document LLM leaderboard evaluations through the providers' batch APIs.

The library under the CLI, for scripts and notebooks::

    from batchrun import load_config, Store, refresh
    config = load_config("batchrun.toml")
    store = Store(config.paths.state)
    outcome = refresh(store, config)
"""

__version__ = "0.1.0"

from .collect import collect  # noqa: E402
from .config import Config, Route, load_config  # noqa: E402
from .errors import (  # noqa: E402
    BatchrunError,
    ConfigError,
    DataError,
    LockError,
    ProviderError,
    StateError,
)
from .plan import plan  # noqa: E402
from .poll import poll  # noqa: E402
from .refresh import refresh  # noqa: E402
from .scoring import leaderboard, report_data  # noqa: E402
from .store import Store  # noqa: E402
from .submit import submit  # noqa: E402

__all__ = [
    "BatchrunError", "Config", "ConfigError", "DataError", "LockError", "ProviderError", "Route", "StateError",
    "Store", "collect", "leaderboard", "load_config", "plan", "poll", "refresh", "report_data", "submit",
    "__version__",
]
