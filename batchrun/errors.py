"""Errors a user can act on.

Every error that reaches the CLI is a `BatchrunError`: a message that names the thing (file, line,
record, key) and a hint that says how to fix it. The CLI prints both and exits 1, without a
traceback. Anything else escaping is a bug in batchrun.
"""

from __future__ import annotations


class BatchrunError(Exception):
    """A problem the user can fix; `hint` says how."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nHint: {self.hint}"


class ConfigError(BatchrunError):
    """The config file is malformed or inconsistent."""


class DataError(BatchrunError):
    """The dataset or corpus is malformed."""


class StateError(BatchrunError):
    """state.db or jobs/ is not in a state batchrun can work with."""


class ProviderError(BatchrunError):
    """A provider (or the emulator) refused or could not be reached."""


class LockError(BatchrunError):
    """Another batchrun process holds the writer lock."""
