"""The cyclic garbage collector paused around a command's bulk work: one home for why and how.

collect, plan and the report each build hundreds of thousands of small dicts, lists and tuples
(rows, lines, report entries) that form no reference cycles: everything is freed by reference
counting the moment it is dropped. The collector's passes over them, triggered by allocation
counts alone, found next to nothing and cost measurable time (the report at 32 routes x 100k
results: ~0.09 s; plan's judge stage at 30 routes: 119 passes, ~0.12 s, 21 objects freed). A
cycle left meanwhile is freed by the first pass after the pause.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the collector for the block; give it back as it was found (a caller that paused it
    itself, a long refresh, finds it paused still), after an exception too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
