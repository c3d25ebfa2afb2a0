"""batchrun: long-document LLM leaderboard evaluations through the providers' batch APIs.

The library under the CLI, for scripts and notebooks::

    from batchrun import load_config, Store, refresh
    config = load_config("batchrun.toml")
    store = Store(config.paths.state)
    outcome = refresh(store, config)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base.errors import BatchrunError, ConfigError, DataError, LockError, ProviderError, StateError
    from .base.version import __version__
    from .ledger.store import Store
    from .protocol.config import Config, Route
    from .protocol.config_file import load_config
    from .publish.outputs import leaderboard, report_data
    from .run.collect import collect
    from .run.plan import plan
    from .run.poll import poll
    from .run.refresh import refresh
    from .run.submit import submit

# Each name is imported from its module when first used, not when the package is: every
# `batchrun` command imports this package first, and importing the whole library here made
# `batchrun --help` pay for state.db, the planner and the report (~0.2 s) before printing a line.
_HOMES = {
    "collect": "run.collect", "Config": "protocol.config", "Route": "protocol.config", "load_config": "protocol.config_file",
    "BatchrunError": "base.errors", "ConfigError": "base.errors", "DataError": "base.errors", "LockError": "base.errors",
    "ProviderError": "base.errors", "StateError": "base.errors", "leaderboard": "publish.outputs", "report_data": "publish.outputs",
    "plan": "run.plan", "poll": "run.poll", "refresh": "run.refresh", "Store": "ledger.store", "submit": "run.submit",
    "__version__": "base.version",
}

__all__ = [
    "BatchrunError", "Config", "ConfigError", "DataError", "LockError", "ProviderError", "Route", "StateError",
    "Store", "collect", "leaderboard", "load_config", "plan", "poll", "refresh", "report_data", "submit",
    "__version__",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'batchrun' has no attribute {name!r}")
    value = getattr(import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
