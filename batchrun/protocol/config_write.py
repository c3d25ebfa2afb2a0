"""Writing into the config file: a route's caps (`batchrun probe ROUTE --write`).

The config is a person's file, with their comments and layout, so it is edited as text, never
re-serialised: only the route's `caps = ...` line (and the probe comment above it) is replaced or
added, and every other byte stays as it was. The edit is checked before it is kept: the new text
must parse to exactly the old config with the new caps, else nothing is written and the error
shows the lines to add by hand. JSON has no comments, so a JSON config is left to the person.
"""

from __future__ import annotations

import copy
import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError

_HEADER = re.compile(r"^\s*\[\s*routes\s*\.\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[A-Za-z0-9_-]+)\s*\]\s*(?:#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")
_CAPS_LINE = re.compile(r"^\s*caps\s*=")
PROBE_COMMENT = "# caps probed "


def caps_lines(caps: dict[str, int], comment: str) -> list[str]:
    return [f"# {comment}", "caps = { " + ", ".join(f"{k} = {v}" for k, v in caps.items()) + " }"]


def _key(token: str) -> str | None:
    try:
        return str(tomllib.loads(f"k = {token}")["k"]) if token[0] in "\"'" else token
    except (tomllib.TOMLDecodeError, IndexError):
        return None


def write_route_caps(path: Path, route: str, en: int | None, cjk: int | None, comment: str) -> None:
    """Set `caps = { en, cjk }` in route `route`'s table of the TOML config at `path`, with
    `comment` above it; ConfigError (and the file untouched) when that cannot be done safely.
    A cap given as None is not written: the route keeps what its caps line says for it, if
    anything (else the built-in table's or the default row's)."""
    data = path.read_bytes()
    text = data.decode("utf-8")
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(newline)
    old = tomllib.loads(text) if path.suffix.lower() != ".json" else {}
    had = old.get("routes", {}).get(route, {}).get("caps") if isinstance(old.get("routes"), dict) else None
    had = had if isinstance(had, dict) else {}
    caps = {k: v for k, v in (("en", en if en is not None else had.get("en")), ("cjk", cjk if cjk is not None else had.get("cjk")))
            if v is not None}
    by_hand = (f"add these lines under [routes.\"{route}\"] in {path} by hand:\n" + "\n".join(caps_lines(caps, comment)))
    if path.suffix.lower() == ".json":
        raise ConfigError(f"--write edits TOML configs, and {path} is JSON (which has no comments to say where the caps came from).",
                          "Set \"caps\": {" + ", ".join(f'\"{k}\": {v}' for k, v in caps.items()) + f"}} in route {route!r} of {path} by hand.")

    start = next((i for i, line in enumerate(lines) if (m := _HEADER.match(line)) and _key(m.group(1)) == route), None)
    if start is None:
        raise ConfigError(f"{path} has no [routes.\"{route}\"] table header that --write can edit (the route may be "
                          "written inline or with dotted keys).", by_hand)
    end = next((i for i in range(start + 1, len(lines)) if _ANY_HEADER.match(lines[i])), len(lines))
    new = caps_lines(caps, comment)
    existing = next((i for i in range(start + 1, end) if _CAPS_LINE.match(lines[i])), None)
    if existing is not None:
        first = existing - 1 if lines[existing - 1].lstrip().startswith(PROBE_COMMENT) else existing
        lines[first : existing + 1] = new
    else:
        last = max((i for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")), default=start)
        lines[last + 1 : last + 1] = new
    edited = newline.join(lines)

    expected: dict[str, Any] = copy.deepcopy(old)
    expected["routes"][route]["caps"] = caps
    try:
        ok = tomllib.loads(edited) == expected
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        raise ConfigError(f"--write could not place the caps in {path} without changing anything else (the route's "
                          "table has a layout it does not edit, e.g. a caps value over several lines).", by_hand)
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(edited.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
