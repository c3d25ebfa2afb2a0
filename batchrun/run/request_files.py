"""Request files on their way to the disk, for plan: each written through a buffer, checksummed
(checksums.REQUEST_ALGORITHM: BLAKE3) on another thread as it is written, written back to the
disk as it grows (and those pages let go of by the page cache), then fsync'ed and renamed into place off the main thread, and recorded on it
once it is on the disk (so a crash leaves a 'writing' batch and a file the next plan clears).
Measured in bench/plan.py and docs/performance.md."""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from ..base.checksums import REQUEST_ALGORITHM, Hasher, new_hasher

# Pieces smaller than _DIRECT_BYTES (request lines without a document, the text around one) are
# gathered up to _GATHER_BYTES and handed to the checksum thread together: a hand-off costs a lock
# round trip and a GIL switch, more than hashing a judge line. Documents go as they are (no copy).
_DIRECT_BYTES = 64 << 10
_GATHER_BYTES = 1 << 20


class BackgroundChecksum:
    """The request file's checksum (checksums.REQUEST_ALGORITHM), fed from the writing thread,
    computed on another one.

    Every byte plan writes is hashed (the checksum submit verifies): 1.75 GB at WildTrace scale
    and 3 routes, ten times that at 30. blake3 releases the GIL while it hashes, so on a second
    core the checksum overlaps the escaping and writing instead of adding to them. The queue is
    bounded: at most four pieces wait (a piece is a gathered 1 MiB or one document's bytes,
    which the writer holds anyway), so memory does not grow if hashing falls behind.
    """

    def __init__(self) -> None:
        self._hash: Hasher = new_hasher(REQUEST_ALGORITHM)
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self._small: list[bytes] = []
        self._small_bytes = 0
        self._thread = threading.Thread(target=self._run, name="batchrun-checksum", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            self._hash.update(data)

    def update(self, data: bytes) -> None:
        # bytes are immutable: safe to hash after the caller moves on. Order is kept: gathered
        # small pieces go before the next big one.
        if len(data) >= _DIRECT_BYTES:
            self._hand_off_small()
            self._queue.put(data)
            return
        self._small.append(data)
        self._small_bytes += len(data)
        if self._small_bytes >= _GATHER_BYTES:
            self._hand_off_small()

    def _hand_off_small(self) -> None:
        if self._small:
            self._queue.put(b"".join(self._small))
            self._small = []
            self._small_bytes = 0

    def close(self) -> None:
        """Hash what is queued and stop the thread."""
        if self._thread.is_alive():
            self._hand_off_small()
            self._queue.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()


# --- getting request files onto the disk ------------------------------------------------------

# macOS has no fdatasync (CPython offers it where the system does); fsync also writes the data.
_DATASYNC = getattr(os, "fdatasync", os.fsync)
# Each request file is written back to the disk every _WRITEBACK_BYTES, on a closer thread. Linux
# starts writing dirty pages in the background once they pass dirty_background_ratio of the
# available memory (10%: ~2 GB here) or grow old (dirty_expire_centisecs, 30 s). At 30 routes
# plan writes 30 files side by side, so gigabytes piled up within seconds, the writes were
# throttled, and each shard's fsync had hundreds of MB to write. Written back as it goes, a file
# keeps the disk busy while plan escapes and builds lines, as a copy that fsyncs each file as it
# ends does (bench/plan_ab.py at 30 routes: 23.2 -> 19.5 s, median of 3 pairs; at 3 routes:
# 2.67 -> 2.45 s).
_WRITEBACK_BYTES = 32 << 20
# Files handed to the closer and not yet recorded: each holds its descriptor (and a duplicate
# while a write-back runs) until it is on the disk. Past this many, handing over one more waits
# for the oldest, so many small files on a slow disk cannot run out of descriptors.
_MAX_PENDING = 8


def _naming(path: Path, call: Callable[[int], None], fd: int) -> None:
    """call(fd), with the file named in its OSError (an fsync's error names none)."""
    try:
        call(fd)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from e


# Once written back, a request file's pages leave the page cache (posix_fadvise DONTNEED; Linux
# has it, macOS does not, where nothing is dropped). Kept, they pile up: 17 GB at 30 routes, more
# than the free memory of a 24 GB machine, so every later write waited for the kernel to find a
# page (reclaim; on a virtual machine, a page the host must back first). Dropped, the next write
# takes a page just freed. The kernel's copy into the page cache was 81% of plan's CPU at 30
# routes (perf), and writing 8 GB into 30 files round-robin took 25-36 s kept against 6-7 s
# dropped (sys time 15-19 s against 3.4-3.9 s, docs/performance.md). Nobody reads the bytes back
# soon: submit reads each file once to upload it, at the network's pace (and a small file, never
# written back, stays cached). Only whole pages below what was synced are dropped: the last,
# partial one would be read back from the disk by the next append; once the file is finished and
# fsync'ed, the rest goes too (_sync_and_place).
_DROP_CACHED = getattr(os, "POSIX_FADV_DONTNEED", None)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _write_back(fd: int, path: Path, start: int, end: int) -> None:
    """On a closer thread: push what a request file holds so far to the disk, then let the
    kernel drop its pages in [start, end) from the page cache. `fd` is a duplicate of the
    writer's, this thread's own, so the writer may close the file meanwhile."""
    try:
        _naming(path, _DATASYNC, fd)
        if _DROP_CACHED is not None and end > start:
            try:
                os.posix_fadvise(fd, start, end - start, _DROP_CACHED)
            except OSError:
                pass  # advice: a kernel that ignores or refuses it changes nothing written
    finally:
        os.close(fd)


def _sync_and_place(file: BinaryIO, tmp: Path, path: Path, writeback: Future[None] | None, dropped: int = 0) -> None:
    """On a closer thread: a finished request file onto the disk, then in place.

    Its last write-back's error is its error: Linux reports a failed write-back once per open
    file, so the fsync below would not repeat it. Waiting for that write-back cannot deadlock: it
    went into the same first-in, first-out pool earlier, so a thread already took it. The folder
    is fsync'ed after the rename, so a 'planned' batch's file survives a power cut under its name.

    A file that was written back as it grew (`writeback`, past _WRITEBACK_BYTES) also leaves the
    page cache from `dropped` (what its write-backs dropped) to its end once the fsync made every
    page clean: up to ~32 MiB a file otherwise stayed cached, more where the disk fell behind
    (while one write-back waits, none other starts). A small file, never written back, stays."""
    try:
        if writeback is not None:
            writeback.result()
        _naming(tmp, os.fsync, file.fileno())
        if writeback is not None and _DROP_CACHED is not None:
            try:
                os.posix_fadvise(file.fileno(), dropped, 0, _DROP_CACHED)  # length 0: to the end
            except OSError:
                pass  # advice, as in _write_back
    finally:
        file.close()
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        _naming(path.parent, os.fsync, folder)
    finally:
        os.close(folder)


class Closer:
    """Request files on their way to the disk, off the main thread.

    A file's fsync waits on the disk with nothing for the CPU to do: ~0.7 s of a 3-route plan's
    ~3 s (1.75 GB) when each full file was fsync'ed on the main thread. fsync releases the GIL
    and needs nothing from the writer, so a thread does it (and the rename) while the main thread
    goes on writing the other routes' files; the batch row follows on the main thread (state.db's),
    in the order the files were finished, once a file is on the disk: the same steps in the same
    order as before, so a crash still leaves a 'writing' row and a file that the next plan clears.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[Future[None], Callable[[], None]]] = deque()

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            # Up to four at once: the last shards of several routes end together.
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="batchrun-fsync")
        return self._pool

    def write_back(self, fd: int, path: Path, start: int, end: int) -> Future[None]:
        """Start pushing what the file `fd` holds so far (flushed to the kernel) to the disk, then
        dropping its cached pages in [start, end) (_write_back)."""
        return self._threads().submit(_write_back, os.dup(fd), path, start, end)

    def close(self, file: BinaryIO, tmp: Path, path: Path, writeback: Future[None] | None, then: Callable[[], None],
              dropped: int = 0) -> None:
        """fsync, close and rename `file` (after its last write-back) on a thread; `then()` on the
        main thread once that is done (settle). `dropped`: where its write-backs' dropping stopped."""
        self._pending.append((self._threads().submit(_sync_and_place, file, tmp, path, writeback, dropped), then))
        while len(self._pending) > _MAX_PENDING:
            self._settle_oldest()

    def _settle_oldest(self) -> None:
        future, then = self._pending.popleft()
        future.result()  # an fsync's OSError is raised here, on the main thread
        then()

    def settle(self, *, wait: bool) -> None:
        """Record the files that are on the disk, in the order they were finished; with wait,
        every file."""
        while self._pending and (wait or self._pending[0][0].done()):
            self._settle_oldest()

    def keep_finished(self) -> None:
        """After a failure: record the files finished before it, up to the first that did not reach
        the disk (plan recorded each as it finished before these threads; the rest stay 'writing'
        for the next plan to clear)."""
        try:
            while self._pending:
                self._settle_oldest()
        except Exception:
            pass  # the failure being raised says what went wrong

    def shutdown(self) -> None:
        """Stop the threads, waiting for what they are doing (after a failure, errors ignored:
        the plan is failing already)."""
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class RequestFile:
    """One request file being written: the open file, its checksum thread, its write-backs."""

    def __init__(self, folder: Path, closer: Closer):
        self.path = folder / "requests.jsonl"
        self.tmp = folder / "requests.jsonl.partial"
        self._closer = closer
        self._file = open(self.tmp, "wb", buffering=1 << 20)
        self._checksum = BackgroundChecksum()
        self._unwritten = 0  # bytes written since the last write-back started
        self._writeback: Future[None] | None = None  # the last write-back (one at a time)
        self._dropped = 0  # the file's pages below this offset are written back and dropped from the cache

    def write(self, data: bytes) -> None:
        # A document (~1 MB) goes past the 1 MiB buffer straight to the file, and the checksum
        # thread hashes the same bytes object: neither copies it.
        self._file.write(data)
        self._checksum.update(data)
        self._unwritten += len(data)
        if self._unwritten >= _WRITEBACK_BYTES and (self._writeback is None or self._writeback.done()):
            if self._writeback is not None:
                self._writeback.result()  # a failed write-back fails the plan here (not silently later)
            self._file.flush()
            synced = self._file.tell()  # what this write-back takes to the disk (at least)
            synced -= synced % _PAGE
            self._writeback = self._closer.write_back(self._file.fileno(), self.tmp, self._dropped, synced)
            self._dropped = max(self._dropped, synced)
            self._unwritten = 0

    def hand_over(self, then: Callable[[str], None]) -> None:
        """Finished: the closer takes the file to the disk, then `then(checksum)` runs on the
        main thread. The checksum thread is at most four pieces behind (milliseconds)."""
        try:
            self._file.flush()  # on this thread: the buffer is the writer's (a full disk refuses it here)
            checksum = self._checksum.hexdigest()
        except BaseException:
            self.abort()  # the writer has let go of this file: it is this method's to close
            raise
        self._closer.close(self._file, self.tmp, self.path, self._writeback, lambda: then(checksum), self._dropped)

    def abort(self) -> None:
        """Stop after a failure: close the file (a write-back has its own descriptor) and stop the
        checksum thread."""
        try:
            self._file.close()
        except OSError:
            pass  # a full disk refuses the buffered rest too: the partial file is dropped anyway
        finally:
            self._checksum.close()
