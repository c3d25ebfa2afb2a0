"""Reading a config's values one by one, each mistake an error that names the file, the key and
the fix (config_file.py reads the sections and routes with it). Every problem is collected, so a
config is read whole and reported at once."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError, all_at_once, did_you_mean
from ..base.userfiles import printable_line

# Integers are bounded where they must survive JSON and SQLite.
MAX_CONFIG_INT = 2**53


class Checker:
    """Small helpers that turn type mistakes into errors naming file and key."""

    def __init__(self, path: Path):
        self.path = path
        # Problems found so far: a config is read whole and every problem reported at once, so a
        # night is not lost to fix-rerun-fix. A section stops at its first hard problem (later
        # checks in it would only repeat it); unknown keys and bad values never stop it.
        self.problems: list[ConfigError] = []

    def section(self, parse: Callable[[], Any]) -> Any:
        """Run one section's parse; a problem it raises is noted (None returned) and reading goes on."""
        try:
            return parse()
        except ConfigError as e:
            self.problems.append(e)
            return None

    def soft(self, error: ConfigError, default: Any) -> Any:
        """Note a problem with a value that nothing else depends on, and read on with the default."""
        self.problems.append(error)
        return default

    def raise_problems(self) -> None:
        if self.problems:
            raise all_at_once(self.problems, str(self.path), "the config")

    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        return ConfigError(f"{self.path}: `{key.removeprefix('.')}` {problem}.", fix)  # ".budget": a top-level key

    def table(self, raw: Any, key: str) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(key, "must be a table", f"Write it as [{key}] with keys below it.")
        return raw

    def array(self, raw: Any, key: str, example: str) -> list[Any]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.fail(key, f"must be a list (got {short_repr(raw)})", f"Write it as a list, e.g. {example}.")
        return raw

    def unknown(self, raw: dict[str, Any], allowed: set[str], where: str) -> None:
        for k in raw:
            if k not in allowed:
                near = ", ".join(sorted(allowed))
                mean = did_you_mean(str(k), sorted(allowed))
                self.problems.append(self.fail(f"{where}.{k}" if where else k, "is not a known key",
                                               f"{mean}Remove it or correct the spelling; known keys here: {near}."))

    def number(self, raw: dict[str, Any], key: str, where: str, default: Any, *, integer: bool = False, minimum: float | None = 0,
               maximum: float | None = None, allow_none: bool = False) -> Any:
        if key not in raw:
            return default
        v = raw[key]
        if v is None and allow_none:
            return None
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok:
            kind = "an integer" if integer else "a number"
            return self.soft(self.fail(f"{where}.{key}", f"must be {kind} (got {v!r})", f"Set {key} = <{kind}>."), default)
        # JSON's NaN/Infinity and TOML's nan/inf compare false with every bound, so they would
        # pass the checks below and poison every estimate and score computed from them.
        if isinstance(v, float) and not math.isfinite(v):
            return self.soft(self.fail(f"{where}.{key}", f"must be a finite number (got {v!r})", f"Set {key} to a finite number."), default)
        if minimum is not None and v < minimum:
            return self.soft(self.fail(f"{where}.{key}", f"must be at least {minimum} (got {v!r})", f"Use a value >= {minimum}."), default)
        # Past 2**53 an integer no longer survives a round trip through JSON or a float, and past
        # 2**63 SQLite cannot store it: no count or size in a config comes near either.
        limit = maximum if maximum is not None else (MAX_CONFIG_INT if integer else None)
        if limit is not None and v > limit:
            return self.soft(self.fail(f"{where}.{key}", f"must be at most {limit:,} (got {v!r})", f"Use a value <= {limit:,}."), default)
        return v

    def string(self, raw: dict[str, Any], key: str, where: str, default: Any, choices: tuple[str, ...] | None = None) -> Any:
        if key not in raw:
            return default
        v = raw[key]

        def bad(problem: str, fix: str) -> Any:
            error = self.fail(f"{where}.{key}", problem, fix)
            if default is None:
                raise error  # a required value (provider, model): the rest of its section depends on it
            return self.soft(error, default)

        if not isinstance(v, str) or not v:
            return bad(f"must be a non-empty string (got {v!r})", f'Set {key} = "...".')
        if not printable_line(v):
            # A NUL breaks every path and SQL call it reaches; a line break forges log and table lines.
            return bad(f"contains a control character or line break ({v!r})", f"Write {key} on one line, without control characters.")
        if choices and v not in choices:
            return bad(f"must be one of {', '.join(choices)} (got {v!r})", f"{did_you_mean(v, choices)}Use one of: {', '.join(choices)}.")
        return v

    def boolean(self, raw: dict[str, Any], key: str, where: str, default: Any) -> Any:
        if key not in raw:
            return default
        v = raw[key]
        if not isinstance(v, bool):
            return self.soft(self.fail(f"{where}.{key}", f"must be true or false (got {v!r})", f"Set {key} = true or {key} = false."), default)
        return v


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
