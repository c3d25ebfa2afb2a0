"""Progress on stderr: one line per event when not on a terminal (cron logs), a live status line
on a terminal. Data never goes here; it goes to stdout."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .redaction import redact


class Progress:
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, live: bool | None = None):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = self.stream.isatty() if live is None else live
        self._status_shown = False
        self.counters = {"files_written": 0, "bytes_uploaded": 0}

    def event(self, message: str) -> None:
        if self.quiet:
            return
        self._clear()
        stamp = time.strftime("%H:%M:%S")
        # Events quote provider messages, which may quote the key back (cron logs keep stderr).
        self.stream.write(f"[{stamp}] {redact(message)}\n")
        self.stream.flush()

    def status(self, message: str) -> None:
        """A transient status (in-flight batches, waiting time): live on a terminal only."""
        if self.quiet or not self.live:
            return
        self.stream.write("\r\x1b[2K" + redact(message)[:200])
        self.stream.flush()
        self._status_shown = True

    def _clear(self) -> None:
        if self._status_shown:
            self.stream.write("\r\x1b[2K")
            self._status_shown = False

    def done(self) -> None:
        self._clear()


SILENT = Progress(quiet=True)
