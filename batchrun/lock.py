"""One writer at a time.

Two cron runs overlapping on the same state.db must not both submit or collect. Writers take an
exclusive `flock` on `state.db.lock` (released by the kernel if the process dies, so a crash never
leaves a stale lock) and write who they are into it, so the second process can say which process
holds it. Readers (`status`, `report`, SQL) never take it: SQLite's WAL lets them read meanwhile.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import IO

from .errors import LockError


class WriterLock:
    def __init__(self, state_path: Path, command: str):
        self.path = Path(str(state_path) + ".lock")
        self.command = command
        self.handle: IO[str] | None = None

    def acquire(self, *, wait: bool = False, grace: float = 5.0) -> "WriterLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        deadline = time.monotonic() + grace
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait and time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip()
                    handle.close()
                    raise LockError(
                        f"Another batchrun process is writing to this state.db: {_describe(holder)}.",
                        "Wait for it to finish, or pass --wait-lock to wait for it. Nothing was changed.",
                    )
                time.sleep(0.2)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "command": self.command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
        handle.flush()
        self.handle = handle
        return self

    def release(self) -> None:
        if self.handle is not None:
            self.handle.seek(0)
            self.handle.truncate()
            self.handle.flush()
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _describe(holder: str) -> str:
    try:
        info = json.loads(holder)
        return f"pid {info['pid']} running `batchrun {info['command']}` since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "an unidentified process"
