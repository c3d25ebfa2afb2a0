"""The checksummed run manifest: anyone holding a published leaderboard can check that its numbers
come from these inputs (`batchrun verify`, verify.py).

`results/manifest.json` is written beside the results files every time they are: the dataset
file's sha256 and record count; each document's sha256 and length in characters; the config in
canonical form (and its sha256) with each route's policy fingerprint; the prompt templates'
sha256; each request file that went out, with its BLAKE3 checksum (its sha256 if it was planned
before batchrun recorded BLAKE3: checksums.py), line count and the provider batch id; each
provider result and error file downloaded into jobs/ (the raw answers everything else is derived
from), with the sha256 poll recorded when it downloaded it; each results file's sha256; whether
the numbers are WildTrace-protocol numbers (`protocol`); batchrun's version and, when run from a
git checkout, the commit and whether the checkout had uncommitted changes (`git_dirty`); and the
id of the state.db that wrote it (`store_id`, meta). Paths in the manifest are relative to the
config file's folder (the project), so a project can be moved or published as a folder.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tomllib
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..base.checksums import RequestChecksum
from ..base.errors import damaged_database
from ..ledger.store import Store, sql_list
from ..protocol.config import Config
from ..protocol.policy import fingerprint
from ..protocol.prompts import GENERATION_TEMPLATE_SHA256, JUDGE_TEMPLATE_SHA256

MANIFEST_NAME = "manifest.json"
# /3: `provider_files` (every downloaded provider result and error file, with its sha256) and
# `protocol`. /2: a request file's checksum is under "blake3" (under "sha256" for a file planned
# before m018_request_blake3); /1 had "sha256" only.
FORMAT = "batchrun-manifest/3"
FORMAT_1 = "batchrun-manifest/1"
FORMAT_2 = "batchrun-manifest/2"
READABLE = (FORMAT_1, FORMAT_2, FORMAT)
# Batches whose request file went out to a provider (or online, for the sync transport).
_SENT = ("in_flight", "ended", "downloaded", "collected", "refused")


def relative(path: Path, root: Path) -> str:
    try:
        return Path(os.path.relpath(Path(path).resolve(), _resolved(root))).as_posix()
    except ValueError:  # another drive (Windows): keep it absolute
        return str(path)


@functools.lru_cache(maxsize=16)
def _resolved(root: Path) -> Path:
    # The project root, resolved once per process, not once per file the manifest lists (1,142
    # files at 300k results in bench/scale.py: ~0.3 s of every collect's manifest).
    return root.resolve()


def canonical_config(config: Config) -> dict[str, Any]:
    """The config file as parsed, keys sorted: what was asked for, byte-stable across formats."""
    text = config.path.read_text(encoding="utf-8")
    raw = json.loads(text) if config.path.suffix.lower() == ".json" else tomllib.loads(text)
    return json.loads(json.dumps(raw, sort_keys=True, ensure_ascii=False))


def _git_state(checkout: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the batchrun checkout running this, if it runs from one (and git is
    there): the HEAD commit, and whether tracked files differ from it (uncommitted changes, staged
    or not; untracked files do not count, as for `git describe --dirty`). (None, None) otherwise.

    The commit stays the bare HEAD sha, which `git checkout` takes, and `git_dirty` says apart
    whether the code that ran was that commit: a dirty tree was published as its clean HEAD.
    The checkout is the folder holding the `batchrun` package (this file is batchrun/publish/
    manifest.py): since the package was laid out in layers, looking beside `publish` found no
    .git, and every manifest said null. (`.git` is a file in a git worktree: exists() either way.)"""
    checkout = checkout or Path(__file__).resolve().parents[2]
    if not (checkout / ".git").exists():
        return None, None
    try:
        # Without the caller's GIT_* variables: a GIT_DIR set by a hook or a CI job would name
        # another repository's HEAD, or none. One call gives both: porcelain v2's `# branch.oid`
        # header is HEAD, every other line a changed tracked file. --no-optional-locks: status
        # would otherwise refresh and rewrite the checkout's index, and writes nothing here.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        out = subprocess.run(["git", "--no-optional-locks", "-C", str(checkout), "status", "--porcelain=v2", "--branch",
                              "--untracked-files=no"], capture_output=True, text=True, timeout=5, env=env)
    except (OSError, subprocess.SubprocessError):
        return None, None
    lines = out.stdout.splitlines()
    commit = next((ln.split()[2] for ln in lines if ln.startswith("# branch.oid ") and len(ln.split()) == 3), "")
    if out.returncode != 0 or len(commit) != 40:
        return None, None  # not a git checkout git will read (another user's: "dubious ownership"), or no commit yet
    return commit, any(not ln.startswith("#") for ln in lines)


def build(store: Store, config: Config, results_files: Mapping[Path, str]) -> dict[str, Any]:
    """`results_files`: each results file's sha256, as written (results_files.publish)."""
    from ..base.version import __version__

    root = config.path.resolve().parent
    ds_path = config.paths.dataset
    ds_sha = store.meta("dataset_sha256")
    n_records = store.scalar("SELECT n_tasks FROM datasets WHERE sha256 = ?", [ds_sha]) if ds_sha else None
    documents = [
        {"name": name, "path": relative(config.paths.corpus / name, root), "sha256": sha, "chars": chars}
        for name, sha, chars in store.db.execute(
            """SELECT DISTINCT d.name, d.sha256, coalesce(r.chars, d.chars) FROM tasks t JOIN documents d ON d.sha256 = t.doc_sha256
               LEFT JOIN document_readings r ON r.sha256 = d.sha256 ORDER BY d.name""")
    ]
    routes = [
        {"route": r["route"], "role": r["role"], "policy_fingerprint": r["policy_fp"]}
        for r in store.rows("SELECT route, role, policy_fp FROM config_routes ORDER BY route")
    ]
    canonical = canonical_config(config)
    commit, dirty = _git_state()
    request_files = []
    # The checksums and line counts state.db recorded when each file was written (one request a
    # line): request files run to GBs, and re-reading them on every collect would cost minutes.
    for b in store.rows(f"SELECT id, request_file, blake3, sha256, n_requests, provider_batch_id FROM batches WHERE status IN {sql_list(_SENT)} ORDER BY seq"):
        checksum = RequestChecksum.of_batch(b)
        request_files.append({
            "batch": b["id"], "path": relative(Path(b["request_file"]), root),
            **({checksum.algorithm: checksum.hexdigest} if checksum else {}),
            "lines": b["n_requests"], "provider_batch_id": b["provider_batch_id"],
        })
    # Those still on disk: a result file deleted before collect read it whose results the provider
    # no longer held (resume.results_gone; else it is downloaded again) answered nothing published.
    provider_files = [
        {"batch": batch, "path": relative(Path(path), root), "sha256": sha}
        for batch, path, sha in recorded_provider_files(store) if Path(path).is_file()
    ]
    return {
        "format": FORMAT,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "batchrun_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,  # true: the code that ran had uncommitted changes to git_commit
        "rehearsal": store.meta("rehearsal"),
        # The state.db that wrote it (meta store_id, made when it was created): verify refuses to
        # check these results against another project's state.db (verify.check_same_store).
        "store_id": store.meta("store_id"),
        "protocol": config.protocol,
        "protocol_note": config.protocol_note,
        "dataset": {"path": relative(ds_path, root), "sha256": ds_sha, "records": n_records},
        "documents": documents,
        "config": {"path": relative(config.path, root), "sha256": fingerprint(canonical), "canonical": canonical},
        "routes": routes,
        "prompt_templates": {"generation_sha256": GENERATION_TEMPLATE_SHA256, "judge_sha256": JUDGE_TEMPLATE_SHA256},
        "request_files": request_files,
        "provider_files": provider_files,
        "results_files": [{"path": relative(p, root), "sha256": results_files[p]} for p in sorted(results_files)],
    }


def recorded_provider_files(store: Store) -> list[tuple[str, str, str | None]]:
    """(batch, path, sha256 as downloaded) of every provider result and error file state.db
    recorded (poll, m015; sha256 None for a file downloaded before m015 recorded it)."""
    has_sha = any(r[1] == "result_files_sha256_json" for r in store.db.execute("PRAGMA table_info(batches)"))
    out = []
    for batch, files, shas in store.db.execute(
            f"SELECT id, result_files_json, {'result_files_sha256_json' if has_sha else 'NULL'} FROM batches "
            "WHERE result_files_json IS NOT NULL ORDER BY seq"):
        try:
            paths = json.loads(files or "[]")
            digests = json.loads(shas) if shas else [None] * len(paths)
        except ValueError as e:
            # Written by poll as JSON lists: anything else was changed in the file since.
            raise damaged_database(store.path, f"batch {batch}'s result_files_json or result_files_sha256_json is not JSON: {e}") from e
        if not isinstance(paths, list) or not isinstance(digests, list):
            raise damaged_database(store.path, f"batch {batch}'s result_files_json or result_files_sha256_json is not a JSON list")
        out += [(batch, path, sha) for path, sha in zip(paths, digests)]
    return out


def write(store: Store, config: Config, results_files: Mapping[Path, str]) -> Path:
    """results/manifest.json, written atomically (a reader never sees half of it), and only when
    something in it other than its `written_at` changed: a collect with nothing new leaves it as is."""
    from .results_files import publish

    path = config.paths.results / MANIFEST_NAME
    data = build(store, config, results_files)
    publish(store, path, data, fingerprint_of={k: v for k, v in data.items() if k != "written_at"},
            private=False)
    return path
