"""batchrun's version, read from the installed distribution's metadata.

pyproject.toml is the one place the version is written; this module reads it back, so the package
`__init__` (which re-exports it) is never imported from inside the package for it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("batchrun")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
