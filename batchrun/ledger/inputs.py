"""The inputs of one command, resolved once at its top and passed down as one value.

A command works from the config, the dataset, the measurements of the corpus documents and each
route's policy and fingerprint. `resolve_inputs` builds them into one frozen `Inputs` before the
command does anything else, and every step below it (plan, preflight, submit, poll, collect,
the sync, the resume checks, the results files) reads them from that value: nothing below the
command reads the dataset, measures a document or builds a policy again. So a refresh of many
rounds works from the inputs as they were when it started, as it always did from the config; an
edit made meanwhile is for the next command, which finds it (and refuses to resume batches built
from the old inputs: resume.py). A document edited mid-command is refused before its new text
could be sent under the old ids (corpus.EscapedDocument).

The dataset and corpus are read only by the commands that read them (plan, submit, collect,
refresh, retry, accept-failures, probe; poll when it sends a sync batch's lines; any writer on
a first run, to validate them before state.db exists); the others resolve the policies alone
(`Inputs.corpus` None). A library caller may pass a Config wherever a command passes Inputs
(`as_inputs`): it is resolved there, once.

Measurements are cached in state.db by file path, size and mtime (tables document_files and
document_readings, m009): `cached_measurements` reads the cache for `resolve_inputs`, and
`record_documents` (called by the sync) writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..protocol.config import Config
from ..protocol.corpus import READING, Corpus, DocumentInfo, Measured, cacheable, scan_corpus
from ..protocol.policy import RoutePolicy, route_policies
from .store import Store


@dataclass(frozen=True)
class Inputs:
    """One command's config, each route's policy, and (for the commands that read them) the
    dataset with its measured corpus."""

    config: Config
    policies: Mapping[str, RoutePolicy]  # every route of the config, by name
    corpus: Corpus | None = None  # None: this command reads neither the dataset nor the corpus

    def policy(self, route: str) -> RoutePolicy:
        return self.policies[route]

    def require_corpus(self) -> Corpus:
        """The corpus, which the command resolved (a step that needs it was called without it: a bug)."""
        if self.corpus is None:
            raise RuntimeError("these inputs were resolved without the dataset and corpus; resolve them with corpus=True")
        return self.corpus


def resolve_inputs(store: Store | None, config: Config, *, corpus: bool = True, escape: bool = False) -> Inputs:
    """The command's inputs: the policies, and with `corpus` the dataset and every document it
    names, measured (state.db's cache, from `store` if there is one, answers for unchanged files).
    `escape`: the command plans (plan, submit, refresh): each document measured now is escaped in
    the same pass and kept for plan (corpus.EscapedSpool), so a plan reads each document once."""
    scanned = scan_corpus(config, cached_measurements(store) if store is not None else None, escape=escape) if corpus else None
    return Inputs(config, route_policies(config), scanned)


def as_inputs(store: Store | None, config: Config | Inputs, *, corpus: bool = True, escape: bool = False) -> Inputs:
    """A library function's `config` argument as Inputs: resolved now if it is a Config (a script
    calling the library), used as it is if a command resolved it (adding the corpus if it lacks
    it and `corpus` is asked for)."""
    if isinstance(config, Config):
        return resolve_inputs(store, config, corpus=corpus, escape=escape)
    if corpus and config.corpus is None:
        return replace(config, corpus=scan_corpus(config.config, cached_measurements(store) if store is not None else None,
                                                  escape=escape))
    return config


def cached_measurements(store: Store) -> Measured:
    """The documents state.db measured under the current reading rule, by file path (m009: a
    measurement made under another rule does not count)."""
    tables = store.db.table_names()
    if "document_files" not in tables or "document_readings" not in tables:
        return {}
    out: dict[str, tuple[int, int, DocumentInfo]] = {}
    for path, size, mtime_ns, sha, nbytes, chars, cjk, translated in store.db.execute(
            """SELECT f.path, f.size, f.mtime_ns, d.sha256, d.bytes, r.chars, r.cjk, r.newlines_translated
               FROM document_files f JOIN documents d ON d.sha256 = f.sha256
               JOIN document_readings r ON r.sha256 = d.sha256 AND r.reading = ?""", [READING]):
        out[path] = (size, mtime_ns, DocumentInfo(name="", sha256=sha, chars=chars, nbytes=nbytes, cjk=bool(cjk),
                                                  newlines_translated=bool(translated)))
    return out


def record_documents(store: Store, corpus: Corpus, now: float) -> None:
    """The corpus's documents and their measurements into state.db (inside the sync's
    transaction), and each file's cache entry under the (size, mtime_ns) it was measured at: a
    file modified in the last 2 s is not cached (corpus.cacheable)."""
    db = store.db
    for cf, info in corpus.docs.items():
        db.execute("INSERT OR IGNORE INTO documents (sha256, name, chars, bytes, cjk) VALUES (?, ?, ?, ?, ?)",
                   [info.sha256, info.name, info.chars, info.nbytes, int(info.cjk)])
        db.execute("""INSERT OR IGNORE INTO document_readings (sha256, reading, chars, cjk, measured_at, newlines_translated)
                      VALUES (?, ?, ?, ?, ?, ?)""", [info.sha256, READING, info.chars, int(info.cjk), now, int(info.newlines_translated)])
        size, mtime_ns = corpus.stamps[cf]
        if cacheable(mtime_ns):
            db.execute("INSERT OR REPLACE INTO document_files (path, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
                       [str(corpus.paths[cf]), size, mtime_ns, info.sha256])
        else:
            db.execute("DELETE FROM document_files WHERE path = ?", [str(corpus.paths[cf])])
