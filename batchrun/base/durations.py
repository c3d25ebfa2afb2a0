"""Lengths of time as a person types them, one syntax for every option that takes one
(`poll --timeout 6h` means what `refresh --timeout 6h` does; `batchrun emulator --latency 2m` and
`python -m batchrun.emulator --latency 2m` too)."""

from __future__ import annotations

import math

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FORMS = "a number of seconds (0 or more) or one with s, m, h or d, like 90, 0.5, 90s, 45m, 6h or 1d"


def parse_duration(value: str | float) -> float:
    """Seconds: finite and 0 or more (a NaN never expires and compares false with every bound;
    infinity never ends). ValueError, naming the accepted forms, for anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        try:
            seconds = float(text[:-1]) * UNITS[text[-1]] if text and text[-1] in UNITS else float(text)
        except ValueError:
            seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is not a duration: give {FORMS}")
    return seconds
