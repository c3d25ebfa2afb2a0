"""Corpus documents: resolved safely, decoded once, measured once.

A document's length is `len()` of its decoded UTF-8 text (the spec counts characters, not bytes).
Its identity is the sha256 of its bytes, which goes into every custom_id built from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .caps import is_cjk
from .errors import DataError


@dataclass(frozen=True)
class DocumentInfo:
    name: str  # path relative to the corpus folder
    sha256: str
    chars: int
    nbytes: int
    cjk: bool


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


def read_text(path: Path, *, where: str) -> tuple[str, bytes]:
    """Decode a document strictly as UTF-8; an error names the byte offset."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{where}: corpus file {path} does not exist.", "Put the document in the corpus folder or fix corpus_file.")
    except OSError as e:
        raise DataError(f"{where}: cannot read corpus file {path}: {e.strerror}.", "Check the file's permissions.")
    try:
        return data.decode("utf-8"), data
    except UnicodeDecodeError as e:
        raise DataError(
            f"{where}: corpus file {path} is not UTF-8 (invalid byte at offset {e.start}).",
            "Convert it to UTF-8 (for example with iconv -f GB18030 -t UTF-8).",
        )


def measure(name: str, text: str, data: bytes) -> DocumentInfo:
    return DocumentInfo(name=name, sha256=hashlib.sha256(data).hexdigest(), chars=len(text), nbytes=len(data), cjk=is_cjk(text))
