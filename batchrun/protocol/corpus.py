"""Corpus documents: resolved safely, streamed in pieces, measured once (then cached in state.db),
JSON-escaped once per plan, and read once per plan: a document a plan measures is escaped in the
same pass and kept (EscapedSpool) until plan writes its lines; one state.db already measured is
read only to be escaped.

A document is its text as the reference harness (Python) reads it: `open(path,
encoding="utf-8").read()`, that is strict UTF-8 with universal newlines (`\r\n` and a lone `\r`
become `\n`) and a UTF-8 BOM kept as U+FEFF (the "utf-8" codec does not strip it). Its length
(the protocol counts characters, not bytes), its CJK head and the text sent in request lines are all
of that text. Its identity is the sha256 of its bytes, which goes into every custom_id built from
it.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..base.errors import BatchrunError, DataError, all_at_once
from ..base.jsonl import escape_utf8
from ..base.userfiles import NotRegularFile, open_regular
from .caps import CJK_WINDOW, is_cjk
from .config import Config
from .dataset import MAX_SHOWN, Dataset, load_dataset

# Documents are read, decoded and escaped in pieces of 32 KiB, so measuring one does not hold it
# in memory (plan holds one escaped document: EscapedDocument). The pieces and their decoded and escaped copies stay below glibc's 128 KiB mmap
# threshold: larger ones are mmapped and unmapped, which raises the threshold and fragments the
# heap (peak RSS grew with the largest document at 256 KiB pieces).
CHUNK_BYTES = 1 << 15

# The reading rule above, by name: state.db caches measurements per reading (document_readings),
# so a change of rule re-measures every document once instead of serving counts made under the
# old one. Change it whenever what `_decoded_chunks` yields changes.
READING = "utf-8/universal-newlines/bom-kept"


@dataclass(frozen=True)
class DocumentInfo:
    name: str  # path relative to the corpus folder
    sha256: str
    chars: int
    nbytes: int
    cjk: bool
    # The reading changed the text (a \r or \r\n became \n): the prompt differs from one built
    # from the raw bytes, and generation ids say so (ledger.generation_custom_id).
    newlines_translated: bool = False


def resolve(corpus_dir: Path, corpus_file: str, *, where: str) -> tuple[str, Path]:
    """Resolve a dataset's `corpus_file` ("name.txt" or "corpus/name.txt") inside the corpus folder.

    A path that escapes the folder (absolute, `..`, a symlink out) is refused: a dataset must not
    be able to make batchrun read and upload arbitrary files.
    """
    name = corpus_file.replace("\\", "/")
    if name.startswith("corpus/"):
        name = name[len("corpus/"):]
    root = corpus_dir.resolve()
    candidate = (root / name).resolve()
    if Path(name).is_absolute() or not candidate.is_relative_to(root):
        raise DataError(
            f"{where}: corpus_file {corpus_file!r} points outside the corpus folder {corpus_dir}.",
            "corpus_file must be a name inside the corpus folder, like \"report.txt\" or \"corpus/report.txt\".",
        )
    return candidate.relative_to(root).as_posix(), candidate


def _decoded_chunks(path: Path, *, where: str, stamp: tuple[int, int] | None = None) -> Iterator[tuple[bytes, str]]:
    """(raw piece, text) pairs for a document, read as the harness reads it (module docstring).

    The newline decoder holds back a `\r` that ends a piece until the next piece shows whether a
    `\n` follows, so a CRLF split across pieces still becomes one `\n`: the text of a piece may be
    one character short, and the next (or the final, empty) piece carries it.

    `stamp`: the (size, mtime_ns) the file had when it was measured; the file opened must still
    have them (`Corpus.stamps`)."""
    decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")("strict"), translate=True)
    offset = 0
    try:
        f = open_regular(path)  # a FIFO here would block the run forever
    except FileNotFoundError:
        raise DataError(f"{where}: corpus file {path} does not exist.", "Put the document in the corpus folder or fix corpus_file.")
    except NotRegularFile as e:
        raise DataError(f"{where}: corpus file {e}.", "corpus_file must name a plain text file in the corpus folder.")
    except OSError as e:
        raise DataError(f"{where}: cannot read corpus file {path}: {e.strerror}.", "Check the file's permissions.")
    with f:
        st = os.fstat(f.fileno())
        if stamp is not None and (st.st_size, st.st_mtime_ns) != stamp:
            # Its ids were made from the measurement (the sha256 of the old bytes): the new text
            # must not go out under them. The next command measures it afresh.
            raise DataError(
                f"{where}: corpus file {path} changed while this command ran ({stamp[0]:,} bytes when it was measured, "
                f"{st.st_size:,} now, or modified since). Nothing of it was sent.",
                "Run the command again: it reads the document afresh (batches already built from the old text are refused "
                "until they end or are cancelled, as after any edit).")
        while True:
            piece = f.read(CHUNK_BYTES)
            try:
                text = decoder.decode(piece, final=not piece)
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{where}: corpus file {path} is not UTF-8 (invalid byte at offset {offset + e.start}).",
                    "Convert it to UTF-8 (for example with iconv -f GB18030 -t UTF-8).",
                )
            yield piece, text
            if not piece:
                return
            offset += len(piece)


def measure_file(name: str, path: Path, *, where: str, stamp: tuple[int, int] | None = None,
                 escaped: list[bytes] | None = None) -> DocumentInfo:
    """sha256 of the bytes, length in characters, size and CJK flag, streamed in pieces.

    `escaped`: also JSON-escape the text (as EscapedDocument does), appending the pieces to it,
    so a plan that measures a document need not read it again to write it. `stamp`: the file's
    (size, mtime_ns) when the caller looked at it; a file changed since is refused."""
    h = hashlib.sha256()
    chars = nbytes = 0
    head = ""
    translated = False
    for piece, text in _decoded_chunks(path, where=where, stamp=stamp):
        h.update(piece)
        if escaped is not None and text:
            escaped.append(escape_utf8(text))
        translated = translated or b"\r" in piece  # UTF-8: a 0x0D byte is always a CR
        nbytes += len(piece)
        chars += len(text)
        if len(head) < CJK_WINDOW:
            head += text[: CJK_WINDOW - len(head)]
    return DocumentInfo(name=name, sha256=h.hexdigest(), chars=chars, nbytes=nbytes, cjk=is_cjk(head),
                        newlines_translated=translated)


def read_document(path: Path, *, where: str, limit: int | None = None) -> str:
    """A document's text as the harness reads it (its first `limit` characters, if given)."""
    parts: list[str] = []
    have = 0
    for _, text in _decoded_chunks(path, where=where):
        parts.append(text)
        have += len(text)
        if limit is not None and have >= limit:
            break
    whole = "".join(parts)
    return whole if limit is None else whole[:limit]


class EscapedDocument:
    """A document JSON-escaped once (line-safe, UTF-8) and kept in memory while plan writes every
    line that carries it, for every route.

    Escaping is per character, so escaping the pieces separately gives the escaping of the whole.
    One document at a time is held (the largest WildTrace document escapes to ~3 MB). An earlier
    version spooled it to a scratch file and read it back for every line: at 30 routes that was
    30 reads of each document through the page cache, and plan's system time grew faster than
    the bytes it wrote (issue 15; docs/performance.md). A document this command measured was
    escaped then (EscapedSpool): it is taken from there, and the file is not read again."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    @classmethod
    def read(cls, path: Path, *, where: str, stamp: tuple[int, int] | None = None) -> EscapedDocument:
        """`stamp`: the file's (size, mtime_ns) when the command measured it (Corpus.stamps): a
        document edited since is refused, not escaped into lines that carry the old one's ids."""
        chunks = _decoded_chunks(path, where=where, stamp=stamp)
        return cls(b"".join([escape_utf8(text) for _, text in chunks if text]))

    @classmethod
    def of(cls, corpus: Corpus, corpus_file: str, *, where: str) -> EscapedDocument:
        """The document as the command measured it (its ids carry that checksum): escaped in the
        same pass if this command measured it, else read now and refused if it changed since."""
        if corpus.escaped is not None and (data := corpus.escaped.take(corpus_file)) is not None:
            return cls(data)
        return cls.read(corpus.paths[corpus_file], where=where, stamp=corpus.stamps[corpus_file])

    def __len__(self) -> int:
        return len(self.data)


class EscapedSpool:
    """Documents escaped while they were measured, kept in an unnamed temporary file until plan
    writes them, so a plan reads each document once (issue 30; a second pass to escape it cost a
    second read and decode of the corpus on every first run). Kept on the disk, not in memory: at
    WildTrace scale the escaped corpus is ~240 MB, and plan's memory must not grow with the
    corpus. The file has no name (tempfile.TemporaryFile, in the temporary folder): nothing is
    left behind, whatever happens to the process. Each document is taken once (`take`)."""

    def __init__(self) -> None:
        self._file: io.BufferedRandom | None = None
        self._where: dict[str, tuple[int, int]] = {}  # corpus_file -> (offset, length)
        self._end = 0

    def put(self, corpus_file: str, pieces: list[bytes]) -> None:
        import tempfile  # here: most commands never spool (tempfile imports shutil and random)

        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="batchrun-escaped-")
            self._file.writelines(pieces)
        except OSError as e:
            # A full or read-only temporary folder is said as such (errors.environment_error
            # names the file an OSError carries), not as a file of the project.
            raise OSError(e.errno, e.strerror, f"{tempfile.gettempdir()} (the temporary folder, TMPDIR: documents "
                                               "escaped for plan wait there)") from e
        n = sum(len(p) for p in pieces)
        self._where[corpus_file] = (self._end, n)
        self._end += n

    def take(self, corpus_file: str) -> bytes | None:
        """The escaped document, once; None if it is not here (not measured by this command, or
        taken already)."""
        spot = self._where.pop(corpus_file, None)
        if spot is None or self._file is None:
            return None
        self._file.flush()
        data = os.pread(self._file.fileno(), spot[1], spot[0])
        if len(data) != spot[1]:
            raise OSError(f"the scratch file of escaped documents returned {len(data)} bytes of {spot[1]}")
        if not self._where:
            self.close()
        return data

    def close(self) -> None:
        self._where.clear()
        if self._file is not None:
            self._file.close()
            self._file = None


# --- scanning the corpus a dataset names ------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """The dataset and every document it names, measured: part of what a command resolves once
    (ledger.inputs) and passes down."""

    dataset: Dataset
    docs: dict[str, DocumentInfo]  # by corpus_file as written in the dataset
    paths: dict[str, Path]  # by corpus_file
    # Each file's (size, mtime_ns) when it was measured, or found measured in state.db: sync
    # caches the measurement under it, and plan refuses a document that changed since
    # (EscapedDocument), whose text would go out under the old checksum's ids.
    stamps: dict[str, tuple[int, int]]
    # The documents measured by this scan, escaped in the same pass (scan_corpus(escape=True):
    # the commands that plan), for plan to take instead of reading them again.
    escaped: EscapedSpool | None = field(default=None, compare=False, repr=False)


# What state.db already measured, by file path (ledger.inputs.cached_measurements): the file's
# (size, mtime_ns) then, and the measurement.
Measured = Mapping[str, tuple[int, int, DocumentInfo]]

# state.db's document_files cache keeps no file modified in the last 2 s: file systems stamp
# mtimes with a coarse clock (a few ms on ext4), so a same-size edit in the same tick would keep
# the key and serve the old checksum ("racily clean", as git calls it).
_RACY_NS = 2_000_000_000


def cacheable(mtime_ns: int) -> bool:
    return mtime_ns < time.time_ns() - _RACY_NS


def scan_corpus(config: Config, measured: Measured | None = None, *, escape: bool = False) -> Corpus:
    """Load the dataset and measure every document it names (validating all, writing nothing).

    `measured`: state.db's measurements; a document found there with the same size and mtime is
    not read again. Without (no state.db yet) every document is measured. `escape`: the command
    will plan; each document measured is escaped in the same pass and kept (Corpus.escaped)."""
    dataset = load_dataset(config.paths.dataset)
    corpus_dir = config.paths.corpus
    if not corpus_dir.is_dir():
        raise DataError(f"Corpus folder {corpus_dir} does not exist.", "Set [paths] corpus in the config, or put the documents in corpus/.")
    cache = measured or {}
    spool = EscapedSpool() if escape else None
    docs: dict[str, DocumentInfo] = {}
    paths: dict[str, Path] = {}
    stamps: dict[str, tuple[int, int]] = {}
    # Every document batchrun cannot use is said in one error, as the dataset's records are: a
    # release with many documents missing is not fixed one run per document.
    problems: list[BatchrunError] = []
    failed: set[str] = set()
    for task in dataset.tasks:
        if task.corpus_file in docs or task.corpus_file in failed:
            continue
        where = f"{task.where or dataset.path} (task {task.task_id}, field corpus_file)"
        try:
            info, name, path, st = _measure(corpus_dir, task.corpus_file, where, cache, spool)
        except DataError as e:
            problems.append(e)
            failed.add(task.corpus_file)
            continue
        docs[task.corpus_file] = info
        paths[task.corpus_file] = path
        stamps[task.corpus_file] = (st.st_size, st.st_mtime_ns)
    if problems:
        more = f" ({len(problems)} in all; the first {MAX_SHOWN} are listed)" if len(problems) > MAX_SHOWN else ""
        raise all_at_once(problems[:MAX_SHOWN], str(dataset.path), "the corpus" + more)
    return Corpus(dataset=dataset, docs=docs, paths=paths, stamps=stamps, escaped=spool)


def _measure(corpus_dir: Path, corpus_file: str, where: str, cache: Measured,
             spool: EscapedSpool | None) -> tuple[DocumentInfo, str, Path, os.stat_result]:
    """One document of scan_corpus: found inside the corpus folder, measured (or its measurement
    taken from state.db when its size and mtime are unchanged)."""
    name, path = resolve(corpus_dir, corpus_file, where=where)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise DataError(f"{where}: corpus file {path} does not exist.", "Put the document in the corpus folder or fix corpus_file.")
    hit = cache.get(str(path))
    if hit is not None and hit[:2] == (st.st_size, st.st_mtime_ns):
        return replace(hit[2], name=name), name, path, st
    if not os.access(path, os.R_OK):
        raise DataError(f"{where}: corpus file {path} is not readable.", "Check the file's permissions.")
    pieces: list[bytes] | None = [] if spool is not None else None
    info = measure_file(name, path, where=where, stamp=(st.st_size, st.st_mtime_ns), escaped=pieces)
    if spool is not None and pieces is not None:
        spool.put(corpus_file, pieces)
    return info, name, path, st
