"""Checksums of the files batchrun writes and later reads back.

Request files are checksummed with **BLAKE3**; everything else with SHA-256. Why the split:

- A request file carries a whole document in every generation line, so a night's request files
  run to 1.75 GB at 3 routes and 17 GB at 30. plan hashes every byte it writes, submit hashes the
  file again before sending it, and `batchrun verify` again. SHA-256 runs at ~1.1 GB/s on this
  project's 2-core machines (OpenSSL, bench/plan.py's host); BLAKE3 (the `blake3` package: the
  reference Rust implementation, SIMD) at ~5 GB/s on one core, and it releases the GIL while it
  hashes, so plan's checksum thread overlaps its writing. BLAKE3 is a cryptographic hash like
  SHA-256: a recorded checksum still says "these exact bytes", and `b3sum` checks it by hand.
- Datasets, documents and results files stay SHA-256: they are small, their digests are
  identities (custom_ids and `dataset_sha256` are built from them), and readers check them
  with `sha256sum`.

Batches planned before m018_request_blake3 recorded only the SHA-256 of their request file; they
are still checked with it (`RequestChecksum.of_batch`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_READ_BYTES = 1 << 20


class Hasher(Protocol):
    def update(self, data: bytes, /) -> Any: ...
    def hexdigest(self) -> str: ...


def new_hasher(algorithm: str) -> Hasher:
    if algorithm == "blake3":
        import blake3  # only where request files are hashed: plan, submit, poll (sync transport), verify

        return blake3.blake3()
    return hashlib.new(algorithm)


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes, read 1 MiB at a time."""
    h = new_hasher(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_READ_BYTES):
            h.update(chunk)
    return h.hexdigest()


# What plan records for the request files it writes from now on.
REQUEST_ALGORITHM = "blake3"


@dataclass(frozen=True, slots=True)
class RequestChecksum:
    """The checksum state.db recorded for a batch's request file, with its algorithm."""

    algorithm: str  # "blake3", or "sha256" for a batch planned before m018
    hexdigest: str

    @classmethod
    def of_batch(cls, batch: Mapping[str, Any]) -> RequestChecksum | None:
        """From a `batches` row (columns blake3 and sha256); None if it recorded neither (a batch
        not yet written)."""
        if batch.get("blake3"):
            return cls("blake3", batch["blake3"])
        if batch.get("sha256"):
            return cls("sha256", batch["sha256"])
        return None

    def matches(self, path: Path) -> tuple[bool, str]:
        """Whether the file at `path` still has these bytes, and its digest now."""
        actual = file_digest(path, self.algorithm)
        return actual == self.hexdigest, actual
